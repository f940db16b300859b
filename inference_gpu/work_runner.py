"""Running the work items the API replicas send a node (`WorkRunner`): each on the model its
revision names (loaded by the model manager if need be), through its engine family's operation,
answered with a `WorkResult` on the node session it came by; with the work in flight counted
against the node's slots, held against unloading, and cancellable.

A draining node refuses work, and work past its deadline is dropped unrun. A failure is answered
with the error code the API service maps to its clients: a `WorkFailure` with its own (what the
family lacks UNIMPLEMENTED, the client's bad input INVALID_ARGUMENT, a model that cannot be had
MODEL_UNAVAILABLE, as a manifest or store error is too), anything else, a `ValueError` from the
node's own code included, INTERNAL with an error reference and the traceback in the log; messages
never carry this node's store URLs, paths or credentials.

It stands apart from `inference_gpu.node` (which wires the node together and routes the API
service's messages) and from `inference_gpu.api_link` (the transport) because it is what the node
does with one work item.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from inference_gpu.api_link import ApiLink
from inference_gpu.families import BadInput, ModelUnavailable, ServedModel, WorkFailure
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import ModelManager
from serval.inference.v1 import node_pb2
from serval_common.manifest import ManifestError
from serval_common.node_codec import alignment_to_wire, detail_of, graph_to_wire, result_to_wire, sender_of
from serval_common.redact import error_reference, redact, secret_values
from serval_common.settings import Settings
from serval_common.store import StoreError

log = logging.getLogger("inference_gpu.node")
"""The node's logger: these records are the node's."""


class WorkRunner:
    def __init__(
        self,
        settings: Settings,
        models: ModelManager,
        metrics: NodeMetrics,
        draining: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self.models = models
        self.metrics = metrics
        self._draining = draining
        """Whether the node is draining now (it refuses new work)."""
        self._secrets = secret_values(settings)
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        """Request id → the work item running."""

    def free_slots(self) -> int:
        return max(0, self.settings.node.slots - len(self.in_flight))

    def start(self, link: ApiLink, item: node_pb2.WorkItem) -> None:
        """Run the work item in the background and answer it on `link`; its revision is held (not
        unloaded) until it is done."""
        location = item.model.location
        self.models.held.hold(location)
        task = asyncio.create_task(self._answer(link, item))
        self.in_flight[item.request_id] = task
        session_work = link.session_work
        session_work.add(item.request_id)

        def done(_: asyncio.Task[None]) -> None:
            self.in_flight.pop(item.request_id, None)
            session_work.discard(item.request_id)
            self.models.held.release(location)

        task.add_done_callback(done)

    def cancel(self, request_id: str) -> None:
        task = self.in_flight.get(request_id)
        if task is not None:
            task.cancel()

    async def finish(self) -> None:
        """Wait for every work item in flight."""
        if self.in_flight:
            await asyncio.wait(list(self.in_flight.values()))

    async def _answer(self, link: ApiLink, item: node_pb2.WorkItem) -> None:
        started = time.perf_counter()
        result = await self.execute(item)
        link.send(result)
        self.metrics.work_time.labels(item.WhichOneof("operation") or "unknown").observe(
            time.perf_counter() - started
        )

    async def execute(self, item: node_pb2.WorkItem) -> node_pb2.WorkResult:
        """The work item's result, or the error it met."""
        extra = {"request_id": item.request_id, "model": item.model.location}
        if self._draining():
            return _error(item, node_pb2.WORK_ERROR_CODE_OVERLOADED, "the node is draining")
        if item.HasField("deadline") and item.deadline.ToNanoseconds() < time.time_ns():
            return _error(
                item,
                node_pb2.WORK_ERROR_CODE_DEADLINE_EXCEEDED,
                "the request's deadline passed before it ran",
            )
        try:
            if item.WhichOneof("operation") == "train_segment":
                # Learned only by a model this node holds ready: a pair never starts a load.
                through = await self.models.segments.learn(item.model, item.train_segment)
                return node_pb2.WorkResult(
                    request_id=item.request_id,
                    train_segment=node_pb2.TrainSegmentOutput(
                        seq=item.train_segment.seq, trained_through=through
                    ),
                )
            model = await self.models.get(item.model)
            return await _run_operation(model, item)
        except (WorkFailure, ManifestError, StoreError) as exc:
            code = exc.code if isinstance(exc, WorkFailure) else ModelUnavailable.code
            if code == ModelUnavailable.code:
                log.warning("model unavailable for work", extra={**extra, "error": str(exc)})
            return _error(item, code, self._shown(exc))
        except Exception as exc:
            message = error_reference("the inference node failed", exc, log, extra)
            return _error(item, node_pb2.WORK_ERROR_CODE_INTERNAL, message)

    def _shown(self, exc: Exception) -> str:
        """A failure as the API service (and maybe its client) reads it: no store URL, path or
        credential of this node."""
        return redact(str(exc), self._secrets)


async def _run_operation(model: ServedModel, item: node_pb2.WorkItem) -> node_pb2.WorkResult:
    """One work item's operation on its model; what the model's family lacks raises `Unsupported`."""
    request_id = item.request_id
    match item.WhichOneof("operation"):
        case "word_graph":
            op = item.word_graph
            graph = await model.word_graph(
                op.segment,
                op.source_language,
                op.target_language,
                engine_id=item.model.engine_id,
                sender=sender_of(item),
            )
            return node_pb2.WorkResult(request_id=request_id, word_graph=graph_to_wire(graph))
        case "align":
            pair = item.align
            alignment = await model.align(pair.source_segment, pair.target_segment)
            return node_pb2.WorkResult(request_id=request_id, alignment=alignment_to_wire(alignment))
        case "translate":
            translate = item.translate
            results = await model.translate(
                translate.segment,
                max(1, translate.n),
                translate.source_language,
                translate.target_language,
                translate.target_prefix,
                engine_id=item.model.engine_id,
                detail=detail_of(translate),
                sender=sender_of(item),
            )
            return node_pb2.WorkResult(
                request_id=request_id,
                translate=node_pb2.TranslateOutput(results=[result_to_wire(r) for r in results]),
            )
        case other:
            raise BadInput(f"unknown operation {other!r}")


def _error(item: node_pb2.WorkItem, code: node_pb2.WorkErrorCode, message: str) -> node_pb2.WorkResult:
    return node_pb2.WorkResult(
        request_id=item.request_id,
        error=node_pb2.WorkError(code=code, message=message),
    )
