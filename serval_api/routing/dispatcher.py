"""The dispatcher: picks a node for each piece of inference work and awaits its answer.

A node that already holds the model revision and has a free slot is preferred (least loaded
first); otherwise the least-loaded node is told to load it and the request waits for the load
within its deadline. Work is never sent beyond a node's advertised slots. Translation is
idempotent, so work on a node that goes away is retried once on another node.
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
from serval_api.routing.work import ModelKey, TranslateWork
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

    def queue_size(self) -> int:
        """Requests waiting for a node slot or a model load."""
        return self._waiting

    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> list[engine_pb2.TranslationResult]:
        op = node_pb2.TranslateOp(
            segment=work.segment,
            n=work.n,
            source_language=work.source_language,
            target_language=work.target_language,
        )
        result = await self._run(work.model, request_id, timeout_s, translate=op)
        return list(result.translate.results)

    async def _run(
        self, model: ModelKey, request_id: str, timeout_s: float, **operation: node_pb2.TranslateOp
    ) -> node_pb2.WorkResult:
        deadline = time.monotonic() + timeout_s
        tried: set[str] = set()
        for attempt in range(2):
            session = await self._acquire(model, deadline, exclude=tried)
            item = node_pb2.WorkItem(
                request_id=request_id,
                deadline=_wall_clock(deadline),
                model=node_pb2.ModelRef(
                    engine_id=model.engine_id, revision=model.revision, location=model.location
                ),
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
            if result.HasField("error"):
                raise _work_error(result.error)
            return result
        raise Unavailable("the inference nodes went away while translating; try again", retry_after_s=1)

    async def _acquire(self, model: ModelKey, deadline: float, exclude: set[str]) -> NodeSession:
        """Wait until a node holds `model` ready with a free slot, asking one to load it if none does."""
        if self._waiting >= self.settings.api.max_queued_requests:
            raise Unavailable("too many requests are waiting for an inference node", retry_after_s=1)
        self._waiting += 1
        try:
            while True:
                sessions = [s for s in self.registry.sessions() if s.session_id not in exclude]
                if not sessions:
                    raise Unavailable("no inference node is connected", retry_after_s=5)
                ready = [s for s in sessions if s.model_state(model.location) == READY]
                free = [s for s in ready if s.accepts_work()]
                if free:
                    return min(free, key=lambda s: len(s.pending))
                if not any(s.model_state(model.location) in (READY, LOADING) for s in sessions):
                    self._request_load(model, sessions)
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
        session = min(candidates, key=lambda s: (len(s.pending), len(s.models)))
        session.models[model.location] = LOADING
        ref = node_pb2.ModelRef(engine_id=model.engine_id, revision=model.revision, location=model.location)
        session.send(node_pb2.ApiMessage(load_model=node_pb2.LoadModel(model=ref)))
        log.info("asked node to load model", extra={"node_id": session.node_id, "model": model.location})


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
