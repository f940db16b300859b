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

Weights: a node holds each set of weights once, and every revision serving them is an alias of
that loaded model (`serval_common.model_revision`). Work for a revision goes to a node holding its
weights ready under any revision, which aliases them without a load, so a new engine on a loaded
base model answers at once; a load is asked for only when no node holds or loads the weights.
Spreading a hot model, failover and retries all go by weights; what differs per engine (its
languages, owner checks, trained segments, `X-Model-Revision`) stays with the revision. The
weights of each revision come with the work (the API service records them when a build
completes) or from what nodes reported.

Families: a node serves the engine families it claimed in Hello; work for an engine goes only to
nodes serving its family.

Train-segment (families that learn segments): the pair goes at once to every node of this replica
holding a revision of the engine READY (never to one loading it, which replays the pairs on
completion, nor to one whose load failed); each pair carries its number and the number before it,
so no node applies it twice and a node that missed one fetches the gap itself. Catching up is the
node's own duty, from the database: every node reports the number its model has learned up to, and
any replica that finds the engine's last pair numbered higher tells it to fetch the rest
(`serval_api.routing.learning`), so a pair trained through any replica, before a restart or while a
node was away, reaches every node.

Hot swap: while no node has an engine's current revision ready, requests go to the newest older
revision that is ready somewhere and some node is told to load the current one. Once a node
reports a revision ready, older revisions of that engine are unloaded everywhere (each node
finishes the work already routed to them first).

Read your writes: a build's completion first has the nodes serving the engine load the new
revision (`prefetch`, bounded by `api.completion_load_wait_s`), so a translate that follows the
build's Completed is answered by the new revision, as Serval's engines answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from google.protobuf.timestamp_pb2 import Timestamp

from serval.inference.v1 import node_pb2
from serval_api.errors import InvalidArgument, NotFound, NotSupported, ServalError, Unavailable
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeGone, NodeSession, model_ref
from serval_api.routing.work import (
    AlignWork,
    Served,
    TrainSegmentWork,
    TranslateWork,
    WordGraphWork,
)
from serval_common.core import TranslationResult, WordAlignmentResult, WordGraph
from serval_common.model_revision import ModelRevision
from serval_common.node_codec import DETAIL_TO_WIRE, alignment_from_wire, graph_from_wire, result_from_wire
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
        self._weights: dict[str, str] = {}
        """Revision location → the weights it serves, as published or as a node reported them."""
        self._newest: dict[str, int] = {}
        """Engine id → the newest revision published or reported ready: a request that read an
        older current revision just before a swap is served by the newer one."""
        self._retiring: dict[str, set[tuple[str, str]]] = {}
        """Engine id → the (session id, model location) pairs not yet reported unloaded."""
        self.on_learning_missed: Callable[[str], None] | None = None
        """Called with the engine id when a node did not learn a pushed pair now (it catches up)."""
        registry.listeners.append(self._model_state_changed)

    def queue_size(self) -> int:
        """Requests waiting for a node slot or a model load."""
        return self._waiting

    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> Served[list[TranslationResult]]:
        op = node_pb2.TranslateOp(
            segment=work.segment,
            n=work.n,
            source_language=work.source_language,
            target_language=work.target_language,
            target_prefix=work.prefix,
            detail=DETAIL_TO_WIRE[work.detail],
        )
        result, served = await self._run(work.model, work.family, request_id, timeout_s, translate=op)
        return Served([result_from_wire(r) for r in result.translate.results], served.revision)

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[WordGraph]:
        op = node_pb2.WordGraphOp(
            segment=work.segment, source_language=work.source_language, target_language=work.target_language
        )
        result, served = await self._run(work.model, work.family, request_id, timeout_s, word_graph=op)
        return Served(graph_from_wire(result.word_graph), served.revision)

    async def align(
        self, work: AlignWork, *, request_id: str, timeout_s: float
    ) -> Served[WordAlignmentResult]:
        op = node_pb2.AlignOp(source_segment=work.source_segment, target_segment=work.target_segment)
        result, served = await self._run(work.model, work.family, request_id, timeout_s, align=op)
        return Served(alignment_from_wire(result.alignment), served.revision)

    async def train_segment(self, work: TrainSegmentWork, *, request_id: str, timeout_s: float) -> int:
        """Send the pair to every node of this replica holding a revision of the engine READY, and
        wait for each within `timeout_s`; how many nodes learned it. The pair is stored first, and
        nothing is unloaded here: a node loading a revision replays it on completion, and a node
        that failed, did not answer in time, went away or is connected only to other replicas
        catches up from the database (`LearningSync`: each node reports the pair number its model
        has learned up to, and any replica tells it to fetch what it lacks)."""
        op = node_pb2.TrainSegmentOp(
            source_segment=work.source_segment,
            target_segment=work.target_segment,
            sentence_start=work.sentence_start,
            seq=work.seq,
            previous_seq=work.previous_seq,
        )
        sent: list[tuple[NodeSession, ModelRevision, str, asyncio.Future[node_pb2.WorkResult]]] = []
        deadline = time.monotonic() + timeout_s
        for session in self.registry.sessions():
            if work.family not in session.families:
                continue
            for key in session.held():
                if key.engine_id != work.model.engine_id or session.model_state(key.location) != READY:
                    continue
                through = session.trained_through(key.location)
                if through is not None and through >= work.seq:
                    continue  # caught up already
                item_id = f"{request_id}-{len(sent)}"
                item = node_pb2.WorkItem(
                    request_id=item_id, deadline=_wall_clock(deadline), model=model_ref(key), train_segment=op
                )
                session.pushing[key.location] = max(work.seq, session.pushing.get(key.location, 0))
                sent.append((session, key, item_id, session.submit(item_id, item)))
        learned = 0
        for session, key, item_id, future in sent:
            extra = {"request_id": request_id, "node_id": session.node_id, "model": key.location}
            try:
                result = await _wait(future, deadline)
            except NodeGone:
                reason = "the node went away"
            except TimeoutError:
                session.forget(item_id)
                reason = "did not answer in time"
            else:
                if not result.HasField("error"):
                    learned += 1
                    if result.train_segment.trained_through > 0:
                        session.models.learned(key.location, result.train_segment.trained_through)
                    if session.pushing.get(key.location) == work.seq:
                        del session.pushing[key.location]
                    continue
                reason = redact(result.error.message)
            if session.pushing.get(key.location) == work.seq:
                del session.pushing[key.location]
            log.warning(
                "a node did not learn a trained segment now; it catches up from the database",
                extra={**extra, "seq": work.seq, "error": reason},
            )
            if self.on_learning_missed is not None:
                self.on_learning_missed(work.model.engine_id)
        await self.registry.notify()
        return learned

    async def _run(
        self,
        model: ModelRevision,
        family: str,
        request_id: str,
        timeout_s: float,
        **operation: node_pb2.TranslateOp | node_pb2.WordGraphOp | node_pb2.AlignOp,
    ) -> tuple[node_pb2.WorkResult, ModelRevision]:
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
        self, model: ModelRevision, family: str, deadline: float, exclude: set[str]
    ) -> tuple[NodeSession, ModelRevision]:
        """Wait until a node holds `model` ready with a free slot, asking one to load it if none does.
        While no node has `model` ready, a node with an older revision of the engine ready serves."""
        if self._waiting >= self.settings.api.max_queued_requests:
            raise Unavailable("too many requests are waiting for an inference node", retry_after_s=1)
        if model.engine_id in self._retiring:
            raise NotFound(f"engine {model.engine_id} not found")
        newest = self._newest.get(model.engine_id, 0)
        if newest > model.revision:
            model = ModelRevision(model.engine_id, newest)
        model = self._known(model)
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
                ready = [s for s in sessions if s.serves(model) == READY]
                free = [s for s in ready if s.accepts_work()]
                if ready and self._hot(model, sessions, ready):
                    self._spread(model, sessions)
                if free:
                    return min(free, key=_load), model
                older = None if ready else _newest_older(model, sessions)
                if not any(s.serves(model) in (READY, LOADING) for s in sessions):
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

    def _request_load(self, model: ModelRevision, sessions: list[NodeSession]) -> None:
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

    def _hot(self, model: ModelRevision, sessions: list[NodeSession], ready: list[NodeSession]) -> bool:
        """Every node holding `model` is loaded past the spread fraction and none is loading it."""
        fraction = self.settings.api.spread_load_fraction
        if fraction <= 0 or any(s.serves(model) == LOADING for s in sessions):
            return False
        return all(s.in_flight >= fraction * s.slots for s in ready)

    def _spread(self, model: ModelRevision, sessions: list[NodeSession]) -> None:
        candidates = [s for s in sessions if s.accepts_work() and s.serves(model) == UNSPECIFIED]
        if candidates:
            _send_load(_best_for_load(model, candidates, sessions), model, why="spreading a hot engine")

    async def retire_engine(self, engine_id: str, timeout_s: float) -> bool:
        """Unload every revision of the engine from every node and wait up to `timeout_s` until each
        node reports it unloaded (its work for it done) or its session ends. Whether all did."""
        self._newest.pop(engine_id, None)
        self._weights = {loc: w for loc, w in self._weights.items() if not _of_engine(loc, engine_id)}
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

    async def prefetch(self, engine_id: str, revision: int, timeout_s: float, weights: str = "") -> bool:
        """Before a build reads Completed: every node holding an older revision of the engine loads
        the new one, and the caller waits up to `timeout_s` until a node has it ready (which then
        supersedes the older ones, `_model_state_changed`), or none is loading it any more (failed,
        or the node went away). True when it is ready, or when no node served the engine (its
        first request then loads the new revision itself); False after a failure or the timeout,
        the older revision then serving until the load ends (the hot swap). A node holding the
        new revision's weights already (an inference-only build of a loaded base model) has it
        ready at once."""
        if engine_id in self._retiring:
            return True
        model = self._learn(ModelRevision(engine_id, revision, weights))
        serving = [s for s in self.registry.sessions() if not s.draining and _older_revisions(s, model)]
        for session in serving:
            if session.model_state(model.location) not in (READY, LOADING):
                _send_load(session, model, why="build completing")
        ids = {s.session_id for s in serving}
        deadline = time.monotonic() + timeout_s
        while True:
            sessions = [s for s in self.registry.sessions() if s.session_id in ids]
            if any(s.serves(model) == READY for s in self.registry.sessions()):
                return True
            if not any(s.serves(model) == LOADING for s in sessions):
                return not serving
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning(
                    "the new revision was not ready in time; the build completes and the older "
                    "revision serves until it is",
                    extra={"engine_id": engine_id, "model": model.location, "waited_s": timeout_s},
                )
                return False
            await self.registry.wait_for_change(remaining)

    def loading(self, model: ModelRevision) -> bool:
        """Whether a node is loading `model` (or its weights) now."""
        model = self._known(model)
        return any(session.serves(model) == LOADING for session in self.registry.sessions())

    def revision_withdrawn(self, engine_id: str, revision: int) -> None:
        """A prefetched revision whose build did not complete (canceled meanwhile): nothing more is
        routed to it and every node unloads it."""
        model = ModelRevision(engine_id, revision)
        if self._newest.get(engine_id, 0) >= revision:
            self._newest.pop(engine_id, None)
        for session in self.registry.sessions():
            if session.model_state(model.location) != UNSPECIFIED:
                session.unload(model)

    def revision_published(
        self, engine_id: str, revision: int, *, weights: str = "", prefetched: bool = False
    ) -> None:
        """Load ahead: every node holding an older revision of the engine starts loading the new one.
        `prefetched`: the build's completion already asked them (`prefetch`), and a node whose load
        failed then is not asked again (a failed revision is retried by a request, not by this)."""
        if engine_id in self._retiring:
            return
        model = self._learn(ModelRevision(engine_id, revision, weights))
        self._newest[engine_id] = max(revision, self._newest.get(engine_id, 0))
        if prefetched:
            return
        for session in self.registry.sessions():
            if (
                not session.draining
                and session.serves(model) not in (READY, LOADING)
                and _older_revisions(session, model)
            ):
                _send_load(session, model, why="published")

    def _model_state_changed(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        if status.model.weights and status.state in (READY, LOADING):
            self._weights[status.model.location] = status.model.weights
        retiring = self._retiring.get(status.model.engine_id)
        if retiring is not None:
            if status.state == node_pb2.MODEL_STATE_UNLOADED:
                retiring.discard((session.session_id, status.model.location))
            elif (session.session_id, status.model.location) not in retiring:
                # A load that raced the deletion: unload it too.
                session.unload(ModelRevision(status.model.engine_id, status.model.revision))
                retiring.add((session.session_id, status.model.location))
            return
        if status.state != READY or session.draining:
            return
        model = self._learn(
            ModelRevision(status.model.engine_id, status.model.revision, status.model.weights)
        )
        self._newest[model.engine_id] = max(model.revision, self._newest.get(model.engine_id, 0))
        for other in self.registry.sessions():
            for old in _older_revisions(other, model):
                self._weights.pop(old.location, None)
                other.unload(old)
                log.info(
                    "asked node to unload superseded model",
                    extra={"node_id": other.node_id, "model": old.location, "by": model.location},
                )

    def _learn(self, model: ModelRevision) -> ModelRevision:
        """Remember the weights a revision serves (when given), or fill them in from what is known."""
        if model.weights:
            self._weights[model.location] = model.weights
            return model
        return self._known(model)

    def _known(self, model: ModelRevision) -> ModelRevision:
        if model.weights:
            return model
        return model.with_weights(self._weights.get(model.location, ""))


def _of_engine(location: str, engine_id: str) -> bool:
    revision = ModelRevision.parse(location)
    return revision is not None and revision.engine_id == engine_id


def _send_load(session: NodeSession, model: ModelRevision, *, why: str) -> None:
    session.load(model)
    log.info(
        "asked node to load model", extra={"node_id": session.node_id, "model": model.location, "why": why}
    )


def _load(session: NodeSession) -> float:
    """How busy the node is, as a fraction of its slots (work from every replica)."""
    return session.in_flight / max(1, session.slots)


def _best_for_load(
    model: ModelRevision, candidates: list[NodeSession], sessions: list[NodeSession]
) -> NodeSession:
    """Prefer a node replacing an older revision of the engine, then one with memory to spare for
    the model (its size as another node reported it; unknown memory counts as room), then the least
    loaded, then the one holding fewest models."""
    size = max((s.models.size_of(model) for s in sessions), default=0)

    def rank(session: NodeSession) -> tuple[bool, bool, float, int]:
        room = session.memory_free_bytes == 0 or session.memory_free_bytes >= size
        return (not _older_revisions(session, model), not room, _load(session), len(session.models))

    return min(candidates, key=rank)


def _older_revisions(session: NodeSession, model: ModelRevision) -> list[ModelRevision]:
    """Revisions of `model`'s engine older than it that the session holds (loading or ready)."""
    return [
        key for key in session.held() if key.engine_id == model.engine_id and key.revision < model.revision
    ]


def _newest_older(
    model: ModelRevision, sessions: list[NodeSession]
) -> tuple[NodeSession, ModelRevision] | None:
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
    """The node's answer by `deadline` (TimeoutError). A caller that goes away cancels the future:
    the session then forgets the request, and a late answer is dropped."""
    async with asyncio.timeout_at(asyncio.get_running_loop().time() + deadline - time.monotonic()):
        return await future


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
