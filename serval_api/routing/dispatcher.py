"""The dispatcher: picks a node for each piece of inference work and awaits its answer.

A node that already holds the model revision and has a free slot is preferred (least loaded
first); otherwise the least-loaded node is told to load it and the request waits for the load
within its deadline. Work is never sent beyond a node's advertised slots. Translation is
idempotent, so work on a node that goes away is retried once on another node.

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
from serval_api.errors import InvalidArgument, ServalError, Unavailable
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeGone, NodeSession
from serval_api.routing.work import ModelKey, Served, TranslateWork, WordGraphWork
from serval_common.settings import Settings

log = logging.getLogger(__name__)

READY = node_pb2.MODEL_STATE_READY
LOADING = node_pb2.MODEL_STATE_LOADING
FAILED = node_pb2.MODEL_STATE_FAILED


class Dispatcher:
    def __init__(self, registry: NodeRegistry, settings: Settings) -> None:
        self.registry = registry
        self.settings = settings
        self._waiting = 0
        self._newest: dict[str, int] = {}
        """Engine id → the newest revision published or reported ready: a request that read an
        older current revision just before a swap is served by the newer one."""
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
        result, served = await self._run(work.model, request_id, timeout_s, translate=op)
        return Served(list(result.translate.results), served.revision)

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[engine_pb2.WordGraph]:
        op = node_pb2.WordGraphOp(
            segment=work.segment, source_language=work.source_language, target_language=work.target_language
        )
        result, served = await self._run(work.model, request_id, timeout_s, word_graph=op)
        return Served(result.word_graph, served.revision)

    async def _run(
        self,
        model: ModelKey,
        request_id: str,
        timeout_s: float,
        **operation: node_pb2.TranslateOp | node_pb2.WordGraphOp,
    ) -> tuple[node_pb2.WorkResult, ModelKey]:
        deadline = time.monotonic() + timeout_s
        tried: set[str] = set()
        for attempt in range(2):
            session, served = await self._acquire(model, deadline, exclude=tried)
            item = node_pb2.WorkItem(
                request_id=request_id,
                deadline=_wall_clock(deadline),
                model=_ref(served),
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
            except TimeoutError:
                session.forget(request_id)
                session.send(node_pb2.ApiMessage(cancel=node_pb2.Cancel(request_id=request_id)))
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
                raise _work_error(result.error)
            return result, served
        raise Unavailable("no inference node could take the request; try again", retry_after_s=1)

    async def _acquire(
        self, model: ModelKey, deadline: float, exclude: set[str]
    ) -> tuple[NodeSession, ModelKey]:
        """Wait until a node holds `model` ready with a free slot, asking one to load it if none does.
        While no node has `model` ready, a node with an older revision of the engine ready serves."""
        if self._waiting >= self.settings.api.max_queued_requests:
            raise Unavailable("too many requests are waiting for an inference node", retry_after_s=1)
        model = ModelKey(model.engine_id, max(model.revision, self._newest.get(model.engine_id, 0)))
        self._waiting += 1
        try:
            while True:
                sessions = [s for s in self.registry.sessions() if s.session_id not in exclude]
                if not sessions:
                    raise Unavailable("no inference node is connected", retry_after_s=5)
                ready = [s for s in sessions if s.model_state(model.location) == READY]
                free = [s for s in ready if s.accepts_work()]
                if free:
                    return min(free, key=lambda s: len(s.pending)), model
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
        finally:
            self._waiting -= 1

    def _request_load(self, model: ModelKey, sessions: list[NodeSession]) -> None:
        candidates = [s for s in sessions if not s.draining and s.model_state(model.location) != FAILED]
        if not candidates:
            reasons = "; ".join(sorted({s.model_errors.get(model.location, "") for s in sessions} - {""}))
            raise Unavailable(f"no inference node could load model {model.location}: {reasons or 'draining'}")
        session = min(
            candidates, key=lambda s: (not _older_revisions(s, model), len(s.pending), len(s.models))
        )
        self._send_load(session, model)

    @staticmethod
    def _send_load(session: NodeSession, model: ModelKey) -> None:
        session.models[model.location] = LOADING
        session.send(node_pb2.ApiMessage(load_model=node_pb2.LoadModel(model=_ref(model))))
        log.info("asked node to load model", extra={"node_id": session.node_id, "model": model.location})

    def revision_published(self, engine_id: str, revision: int) -> None:
        """Load ahead: every node holding an older revision of the engine starts loading the new one."""
        model = ModelKey(engine_id, revision)
        self._newest[engine_id] = max(revision, self._newest.get(engine_id, 0))
        for session in self.registry.sessions():
            if (
                not session.draining
                and session.model_state(model.location) not in (READY, LOADING)
                and _older_revisions(session, model)
            ):
                self._send_load(session, model)

    def _model_state_changed(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        if status.state != READY or session.draining:
            return
        model = ModelKey(status.model.engine_id, status.model.revision)
        self._newest[model.engine_id] = max(model.revision, self._newest.get(model.engine_id, 0))
        for other in self.registry.sessions():
            for old in _older_revisions(other, model):
                other.models.pop(old.location, None)
                other.send(node_pb2.ApiMessage(unload_model=node_pb2.UnloadModel(model=_ref(old))))
                log.info(
                    "asked node to unload superseded model",
                    extra={"node_id": other.node_id, "model": old.location, "by": model.location},
                )


def _ref(model: ModelKey) -> node_pb2.ModelRef:
    return node_pb2.ModelRef(engine_id=model.engine_id, revision=model.revision, location=model.location)


def _parse_location(location: str) -> ModelKey | None:
    parts = location.split("/")
    if len(parts) != 3 or parts[0] != "models" or not parts[2].isdigit():
        return None
    return ModelKey(parts[1], int(parts[2]))


def _older_revisions(session: NodeSession, model: ModelKey) -> list[ModelKey]:
    """Revisions of `model`'s engine older than it that the session holds (loading or ready)."""
    keys = (_parse_location(location) for location in list(session.models))
    return [
        key
        for key in keys
        if key is not None and key.engine_id == model.engine_id and key.revision < model.revision
    ]


def _newest_older(model: ModelKey, sessions: list[NodeSession]) -> tuple[NodeSession, ModelKey] | None:
    """A free session with the newest older revision of the engine ready, least loaded first."""
    choices = [
        (older.revision, -len(session.pending), session, older)
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
    if error.code == node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT:
        return InvalidArgument(error.message)
    return Unavailable(f"the inference node could not translate: {error.message}", retry_after_s=1)
