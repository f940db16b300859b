"""The dispatcher: picks a node for each piece of inference work and awaits its answer.

A node that already holds the model revision and has a free slot is preferred (least loaded
first); otherwise the least-loaded node with memory to spare is told to load it and the request
waits for the load within its deadline. Work is never sent beyond a node's advertised slots.
Translation is idempotent, so work on a node that goes away is retried once on another node. A
request whose caller gives up (deadline passed, client cancelled) is cancelled on the node too.

Spreading: when every node holding a revision is loaded past `api.spread_load_fraction` of its
slots, one more node is told to load it, so a hot engine is served by several nodes at once.

Deleting an engine retires it: nothing more is routed to it, every node is told to unload its
revisions (each finishes the work already routed to them first) and the caller waits until they
have, so the engine's files can then leave the model store without pulling them from under a node.

Families: a node serves the engine families it claimed in Hello; work for an engine goes only to
nodes serving its family.

Train-segment (families that learn segments): the pair goes to every node holding a revision of the
engine, ready or loading, at once; a node loading a revision later replays the pairs itself
(`GetTrainSegments`), and each pair carries its number so no node applies it twice. A node that
fails to learn a pair unloads the revision, and one whose session ended first unloads it when it
reconnects still holding it, so no node serves a model that missed a pair.

Hot swap: while no node has an engine's current revision ready, requests go to the newest older
revision that is ready somewhere and some node is told to load the current one. Once a node
reports a revision ready, older revisions of that engine are unloaded everywhere (each node
finishes the work already routed to them first).
"""

from __future__ import annotations

import asyncio
import logging
import time

from google.protobuf.timestamp_pb2 import Timestamp

from serval.inference.v1 import node_pb2
from serval.translation.v1 import engine_pb2
from serval.word_alignment.v1 import engine_pb2 as alignment_pb2
from serval_api.errors import InvalidArgument, NotFound, NotSupported, ServalError, Unavailable
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeGone, NodeSession, model_ref
from serval_api.routing.work import (
    AlignWork,
    ModelKey,
    Served,
    TrainSegmentWork,
    TranslateWork,
    WordGraphWork,
)
from serval_common.redact import redact
from serval_common.settings import Settings

log = logging.getLogger(__name__)

READY = node_pb2.MODEL_STATE_READY
LOADING = node_pb2.MODEL_STATE_LOADING
FAILED = node_pb2.MODEL_STATE_FAILED
UNSPECIFIED = node_pb2.MODEL_STATE_UNSPECIFIED


class Dispatcher:
    def __init__(self, registry: NodeRegistry, settings: Settings) -> None:
        self.registry = registry
        self.settings = settings
        self._waiting = 0
        self._newest: dict[str, int] = {}
        """Engine id → the newest revision published or reported ready: a request that read an
        older current revision just before a swap is served by the newer one."""
        self._retiring: dict[str, set[tuple[str, str]]] = {}
        """Engine id → the (session id, model location) pairs not yet reported unloaded."""
        self._missed: dict[tuple[str, str], int] = {}
        """(node id, model location) → the number of a trained segment sent to the node whose
        session ended before it answered. A later session of that node that reports the model still
        held is told to unload it, so its next load replays the pair."""
        registry.listeners.append(self._model_state_changed)

    def queue_size(self) -> int:
        """Requests waiting for a node slot or a model load."""
        return self._waiting

    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> Served[list[engine_pb2.TranslationResult]]:
        op = node_pb2.TranslateOp(
            segment=work.segment,
            n=work.n,
            source_language=work.source_language,
            target_language=work.target_language,
            target_prefix=work.prefix,
        )
        result, served = await self._run(work.model, work.family, request_id, timeout_s, translate=op)
        return Served(list(result.translate.results), served.revision)

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[engine_pb2.WordGraph]:
        op = node_pb2.WordGraphOp(
            segment=work.segment, source_language=work.source_language, target_language=work.target_language
        )
        result, served = await self._run(work.model, work.family, request_id, timeout_s, word_graph=op)
        return Served(result.word_graph, served.revision)

    async def align(
        self, work: AlignWork, *, request_id: str, timeout_s: float
    ) -> Served[alignment_pb2.WordAlignmentResult]:
        op = node_pb2.AlignOp(source_segment=work.source_segment, target_segment=work.target_segment)
        result, served = await self._run(work.model, work.family, request_id, timeout_s, align=op)
        return Served(result.alignment, served.revision)

    async def train_segment(self, work: TrainSegmentWork, *, request_id: str, timeout_s: float) -> int:
        """Send the pair to every node holding a revision of the engine (ready or loading) and wait
        for each within `timeout_s`; how many nodes learned it. The pair is stored first, so a node
        learns it on its next load of the revision: one that failed or did not answer in time is
        told to unload the revision now, one that went away when it reconnects still holding it, so
        no node serves a model without the pair."""
        op = node_pb2.TrainSegmentOp(
            source_segment=work.source_segment,
            target_segment=work.target_segment,
            sentence_start=work.sentence_start,
            seq=work.seq,
        )
        sent: list[tuple[NodeSession, ModelKey, str, asyncio.Future[node_pb2.WorkResult]]] = []
        deadline = time.monotonic() + timeout_s
        for session in self.registry.sessions():
            if work.family not in session.families:
                continue
            for key in session.held():
                if key.engine_id != work.model.engine_id:
                    continue
                item_id = f"{request_id}-{len(sent)}"
                item = node_pb2.WorkItem(
                    request_id=item_id, deadline=_wall_clock(deadline), model=model_ref(key), train_segment=op
                )
                sent.append((session, key, item_id, session.submit(item_id, item)))
        learned = 0
        for session, key, item_id, future in sent:
            extra = {"request_id": request_id, "node_id": session.node_id, "model": key.location}
            try:
                result = await _wait(future, deadline)
            except NodeGone:
                self._missed[(session.node_id, key.location)] = work.seq
                log.warning(
                    "a node went away before it learned a trained segment", extra={**extra, "seq": work.seq}
                )
                continue
            except TimeoutError:
                session.forget(item_id)
                reason = "did not answer in time"
            else:
                if not result.HasField("error"):
                    learned += 1
                    continue
                reason = redact(result.error.message)
            if not session.closed:
                session.unload(key)
            log.warning(
                "a node did not learn a trained segment; it unloads the revision",
                extra={**extra, "seq": work.seq, "error": reason},
            )
        await self.registry.notify()
        return learned

    async def _run(
        self,
        model: ModelKey,
        family: str,
        request_id: str,
        timeout_s: float,
        **operation: node_pb2.TranslateOp | node_pb2.WordGraphOp | node_pb2.AlignOp,
    ) -> tuple[node_pb2.WorkResult, ModelKey]:
        deadline = time.monotonic() + timeout_s
        tried: set[str] = set()
        for attempt in range(2):
            session, served = await self._acquire(model, family, deadline, exclude=tried)
            item = node_pb2.WorkItem(
                request_id=request_id,
                deadline=_wall_clock(deadline),
                model=model_ref(served),
                **operation,
            )
            future = session.submit(request_id, item)
            try:
                result = await _wait(future, deadline)
            except NodeGone:
                tried.add(session.session_id)
                log.warning(
                    "node went away with work in flight; retrying",
                    extra={"request_id": request_id, "node_id": session.node_id, "attempt": attempt},
                )
                continue
            except (TimeoutError, asyncio.CancelledError) as exc:
                session.forget(request_id)
                session.send(node_pb2.ApiMessage(cancel=node_pb2.Cancel(request_id=request_id)))
                if isinstance(exc, asyncio.CancelledError):
                    log.info(
                        "caller went away; work cancelled on the node",
                        extra={"request_id": request_id, "node_id": session.node_id},
                    )
                    raise
                raise Unavailable(f"the translation did not finish within {timeout_s:g} s") from None
            finally:
                await self.registry.notify()
            if result.HasField("error") and result.error.code == node_pb2.WORK_ERROR_CODE_OVERLOADED:
                tried.add(session.session_id)
                log.info(
                    "node refused work (draining or full); retrying elsewhere",
                    extra={"request_id": request_id, "node_id": session.node_id, "attempt": attempt},
                )
                continue
            if result.HasField("error"):
                log.warning(
                    "the inference node could not do the work",
                    extra={
                        "request_id": request_id,
                        "node_id": session.node_id,
                        "code": result.error.code,
                        "error": result.error.message,
                    },
                )
                raise _work_error(result.error)
            return result, served
        raise Unavailable("no inference node could take the request; try again", retry_after_s=1)

    async def _acquire(
        self, model: ModelKey, family: str, deadline: float, exclude: set[str]
    ) -> tuple[NodeSession, ModelKey]:
        """Wait until a node holds `model` ready with a free slot, asking one to load it if none does.
        While no node has `model` ready, a node with an older revision of the engine ready serves."""
        if self._waiting >= self.settings.api.max_queued_requests:
            raise Unavailable("too many requests are waiting for an inference node", retry_after_s=1)
        if model.engine_id in self._retiring:
            raise NotFound(f"engine {model.engine_id} not found")
        model = ModelKey(model.engine_id, max(model.revision, self._newest.get(model.engine_id, 0)))
        self._waiting += 1
        try:
            while True:
                connected = [
                    s
                    for s in self.registry.sessions()
                    if s.session_id not in exclude and family in s.families
                ]
                if not connected:
                    raise Unavailable(
                        f"no inference node serving {family} engines is connected", retry_after_s=1
                    )
                sessions = [s for s in connected if not s.draining]
                if not sessions:
                    raise Unavailable("every inference node is draining", retry_after_s=5)
                ready = [s for s in sessions if s.model_state(model.location) == READY]
                free = [s for s in ready if s.accepts_work()]
                if ready and self._hot(model, sessions, ready):
                    self._spread(model, sessions)
                if free:
                    return min(free, key=_load), model
                older = None if ready else _newest_older(model, sessions)
                if not any(s.model_state(model.location) in (READY, LOADING) for s in sessions):
                    try:
                        self._request_load(model, sessions)
                    except Unavailable:
                        if older is None:
                            raise
                if older is not None:
                    return older
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Unavailable("no inference node could take the request in time", retry_after_s=1)
                await self.registry.wait_for_change(remaining)
                if model.engine_id in self._retiring:
                    raise NotFound(f"engine {model.engine_id} not found")
        finally:
            self._waiting -= 1

    def _request_load(self, model: ModelKey, sessions: list[NodeSession]) -> None:
        """A node that failed to load `model` is asked again once `api.failed_load_retry_s` has
        passed (the store may be back); a revision that fails its checksum fails again, unserved."""
        retry_before = time.monotonic() - self.settings.api.failed_load_retry_s
        candidates = [
            s
            for s in sessions
            if not s.draining
            and (
                s.model_state(model.location) != FAILED or s.failed_at.get(model.location, 0) <= retry_before
            )
        ]
        if not candidates:
            reasons = "; ".join(sorted({s.model_errors.get(model.location, "") for s in sessions} - {""}))
            raise Unavailable(f"no inference node could load model {model.location}: {reasons or 'draining'}")
        _send_load(_best_for_load(model, candidates, sessions), model, why="requested")

    def _hot(self, model: ModelKey, sessions: list[NodeSession], ready: list[NodeSession]) -> bool:
        """Every node holding `model` is loaded past the spread fraction and none is loading it."""
        fraction = self.settings.api.spread_load_fraction
        if fraction <= 0 or any(s.model_state(model.location) == LOADING for s in sessions):
            return False
        return all(s.in_flight >= fraction * s.slots for s in ready)

    def _spread(self, model: ModelKey, sessions: list[NodeSession]) -> None:
        candidates = [
            s for s in sessions if s.accepts_work() and s.model_state(model.location) == UNSPECIFIED
        ]
        if candidates:
            _send_load(_best_for_load(model, candidates, sessions), model, why="spreading a hot engine")

    async def retire_engine(self, engine_id: str, timeout_s: float) -> bool:
        """Unload every revision of the engine from every node and wait up to `timeout_s` until each
        node reports it unloaded (its work for it done) or its session ends. Whether all did."""
        self._newest.pop(engine_id, None)
        gone = f"models/{engine_id}/"
        self._missed = {key: seq for key, seq in self._missed.items() if not key[1].startswith(gone)}
        waiting = self._retiring.setdefault(engine_id, set())
        try:
            for session in self.registry.sessions():
                for key in session.held():
                    if key.engine_id == engine_id:
                        session.unload(key)
                        waiting.add((session.session_id, key.location))
            if waiting:
                log.info(
                    "asked nodes to unload a deleted engine",
                    extra={"engine_id": engine_id, "models": len(waiting)},
                )
            await self.registry.notify()
            deadline = time.monotonic() + timeout_s
            while True:
                live = {s.session_id for s in self.registry.sessions()}
                waiting.intersection_update((sid, loc) for sid, loc in list(waiting) if sid in live)
                if not waiting:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning(
                        "nodes did not unload a deleted engine in time",
                        extra={"engine_id": engine_id, "models": sorted(loc for _, loc in waiting)},
                    )
                    return False
                await self.registry.wait_for_change(remaining)
        finally:
            self._retiring.pop(engine_id, None)

    def revision_published(self, engine_id: str, revision: int) -> None:
        """Load ahead: every node holding an older revision of the engine starts loading the new one."""
        if engine_id in self._retiring:
            return
        model = ModelKey(engine_id, revision)
        self._newest[engine_id] = max(revision, self._newest.get(engine_id, 0))
        for session in self.registry.sessions():
            if (
                not session.draining
                and session.model_state(model.location) not in (READY, LOADING)
                and _older_revisions(session, model)
            ):
                _send_load(session, model, why="published")

    def _model_state_changed(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        missed = self._missed.pop((session.node_id, status.model.location), None)
        if missed is not None and status.state in (READY, LOADING):
            session.unload(ModelKey(status.model.engine_id, status.model.revision))
            log.info(
                "asked a reconnected node to unload a model that missed a trained segment",
                extra={"node_id": session.node_id, "model": status.model.location, "seq": missed},
            )
            return
        retiring = self._retiring.get(status.model.engine_id)
        if retiring is not None:
            if status.state == node_pb2.MODEL_STATE_UNLOADED:
                retiring.discard((session.session_id, status.model.location))
            elif (session.session_id, status.model.location) not in retiring:
                # A load that raced the deletion: unload it too.
                session.unload(ModelKey(status.model.engine_id, status.model.revision))
                retiring.add((session.session_id, status.model.location))
            return
        if status.state != READY or session.draining:
            return
        model = ModelKey(status.model.engine_id, status.model.revision)
        self._newest[model.engine_id] = max(model.revision, self._newest.get(model.engine_id, 0))
        for other in self.registry.sessions():
            for old in _older_revisions(other, model):
                other.unload(old)
                log.info(
                    "asked node to unload superseded model",
                    extra={"node_id": other.node_id, "model": old.location, "by": model.location},
                )


def _send_load(session: NodeSession, model: ModelKey, *, why: str) -> None:
    session.load(model)
    log.info(
        "asked node to load model", extra={"node_id": session.node_id, "model": model.location, "why": why}
    )


def _load(session: NodeSession) -> float:
    """How busy the node is, as a fraction of its slots (work from every replica)."""
    return session.in_flight / max(1, session.slots)


def _best_for_load(
    model: ModelKey, candidates: list[NodeSession], sessions: list[NodeSession]
) -> NodeSession:
    """Prefer a node replacing an older revision of the engine, then one with memory to spare for
    the model (its size as another node reported it; unknown memory counts as room), then the least
    loaded, then the one holding fewest models."""
    size = max((s.model_sizes.get(model.location, 0) for s in sessions), default=0)

    def rank(session: NodeSession) -> tuple[bool, bool, float, int]:
        room = session.memory_free_bytes == 0 or session.memory_free_bytes >= size
        return (not _older_revisions(session, model), not room, _load(session), len(session.models))

    return min(candidates, key=rank)


def _older_revisions(session: NodeSession, model: ModelKey) -> list[ModelKey]:
    """Revisions of `model`'s engine older than it that the session holds (loading or ready)."""
    return [
        key for key in session.held() if key.engine_id == model.engine_id and key.revision < model.revision
    ]


def _newest_older(model: ModelKey, sessions: list[NodeSession]) -> tuple[NodeSession, ModelKey] | None:
    """A free session with the newest older revision of the engine ready, least loaded first."""
    choices = [
        (older.revision, -_load(session), session, older)
        for session in sessions
        if session.accepts_work()
        for older in _older_revisions(session, model)
        if session.model_state(older.location) == READY
    ]
    if not choices:
        return None
    _, _, session, older = max(choices, key=lambda choice: (choice[0], choice[1]))
    return session, older


async def _wait(future: asyncio.Future[node_pb2.WorkResult], deadline: float) -> node_pb2.WorkResult:
    return await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))


def _wall_clock(deadline: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int((time.time() + deadline - time.monotonic()) * 1e9))
    return stamp


def _work_error(error: node_pb2.WorkError) -> ServalError:
    """The node's text, sanitized: a node's store errors name its store and cache folders."""
    message = redact(error.message)
    if error.code == node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT:
        return InvalidArgument(message)
    if error.code == node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED:
        return NotSupported(message)
    return Unavailable(f"the inference node could not translate: {message}", retry_after_s=1)
