"""The inference node process: dials every API service address, says hello, keeps heartbeats,
answers work items, and drains on SIGTERM.

One `ApiLink` per API address keeps one node session alive, redialing with exponential backoff
and jitter whenever the stream drops, and re-announcing the models already held. An address whose
host name resolves to several addresses (one per API replica, e.g. a headless Kubernetes
service) gets one link per resolved address; names are re-resolved every
`node.resolve_interval_s` to pick up new replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import time
import uuid

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from inference_gpu.families import InputTooLong, ServedModel, Unsupported, available_families
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import ModelManager
from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_common.families import family
from serval_common.manifest import ManifestError
from serval_common.node_codec import alignment_to_wire, detail_of, graph_to_wire, result_to_wire
from serval_common.redact import error_reference, redact, secret_values
from serval_common.settings import Settings
from serval_common.store import StoreError, store_from_settings
from serval_common.tls import aio_client_channel, common_host_name

log = logging.getLogger(__name__)

PROTOCOL_VERSION = node_pb2.PROTOCOL_VERSION_2
VERSION = "0.1.0"
REDIAL_MAX_S = 5.0
"""The longest pause between redials (before jitter): a restarted API replica gets its nodes back
within seconds, and a dial attempt costs the API service next to nothing."""


TRAIN_SEGMENTS_TIMEOUT_S = 120.0
"""How long a node waits for an API service's trained segments (streamed, however many) when it
loads or catches up a model."""


class NodeRejected(Exception):
    """The API service refused this node (bad token, incompatible protocol): redialing won't help."""


class InferenceNode:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.node_id = settings.node.node_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        store = store_from_settings(settings)
        device = self.device_info()
        self.device_kind = device.kind
        self.metrics = NodeMetrics(device_kind=device.kind, device_index=device.index)
        self.models = ModelManager(settings, store, self.metrics, segment_source=self.train_segments)
        self.families = available_families(settings.node.families)
        self.draining = False
        self.shutting_down = False
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.links = [ApiLink(self, address) for address in resolve_addresses(settings.node.api_addresses)]
        self.models.listeners.append(self._broadcast_status)
        self._secrets = secret_values(settings)

    def device_info(self) -> node_pb2.DeviceInfo:
        import ctranslate2

        cuda = self.settings.node.device == "cuda" or (
            self.settings.node.device == "auto" and ctranslate2.get_cuda_device_count() > 0
        )
        kind = "cuda" if cuda else "cpu"
        compute = self.settings.node.compute_type
        if compute == "auto":
            compute = "int8_float16" if cuda else "int8"
        page, pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
        return node_pb2.DeviceInfo(
            kind=kind,
            index=self.settings.node.device_index,
            name=kind,
            compute_type=compute,
            memory_total_bytes=page * pages,
            memory_free_bytes=page * os.sysconf("SC_AVPHYS_PAGES"),
        )

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT (then drain) or until the API service rejects the node."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if self.settings.node.metrics_port:
            self.metrics.serve(self.settings.node.metrics_port, self.settings.node.metrics_host)
        tasks = [asyncio.create_task(link.run()) for link in self.links]
        tasks.append(asyncio.create_task(self._resolve_loop(tasks)))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        try:
            for task in done:
                if task is not stopper:
                    task.result()
            await self.drain()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.models.close()

    async def _resolve_loop(self, tasks: list[asyncio.Task[None]]) -> None:
        """Add a link for every API address that a name newly resolves to."""
        while True:
            await asyncio.sleep(self.settings.node.resolve_interval_s)
            known = {link.address for link in self.links}
            addresses = await asyncio.to_thread(resolve_addresses, self.settings.node.api_addresses)
            for address in addresses:
                if address not in known and not self.draining:
                    log.info("new API service address", extra={"api": address})
                    link = ApiLink(self, address)
                    self.links.append(link)
                    tasks.append(asyncio.create_task(link.run()))

    async def drain(self) -> None:
        """Refuse new work, finish what is in flight, say goodbye."""
        self.draining = self.shutting_down = True
        log.info("draining", extra={"node_id": self.node_id, "in_flight": len(self.in_flight)})
        for link in self.links:
            link.send_heartbeat()
        if self.in_flight:
            await asyncio.wait(list(self.in_flight.values()))
        for link in self.links:
            await link.say_goodbye("node shutting down")

    async def train_segments(
        self, ref: node_pb2.ModelRef, after_seq: int = 0
    ) -> tuple[list[node_pb2.TrainSegmentOp], int]:
        """The engine's segments trained since `ref`'s build and numbered above `after_seq`, and
        the number a model has learned up to once it applied them, from the first API service that
        answers (welcomed links first); the last failure when none does."""
        links = sorted(self.links, key=lambda link: not link.registered)
        failure: Exception = ConnectionError("the node has no API service address")
        for link in links:
            try:
                return await link.train_segments(ref, after_seq)
            except grpc.RpcError as exc:
                failure = exc
        raise failure

    def free_slots(self) -> int:
        return max(0, self.settings.node.slots - len(self.in_flight))

    def set_draining(self, draining: bool, reason: str = "") -> None:
        """An admin's drain or undrain (an undrain cannot stop a shutdown); every API replica hears
        of it at once."""
        draining = draining or self.shutting_down
        if draining != self.draining:
            log.info(
                "draining" if draining else "undrained", extra={"node_id": self.node_id, "reason": reason}
            )
        self.draining = draining
        for link in self.links:
            link.send_heartbeat()

    def memory_free_bytes(self) -> int:
        """What more models may take: the memory budget less the models held, else the host's
        available memory on a CPU node; 0 (unknown) on a GPU without a budget."""
        budget = self.settings.node.memory_budget_bytes
        if budget > 0:
            return max(1, budget - self.models.bytes_held())
        if self.device_kind == "cpu":
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
        return 0

    def _broadcast_status(self, status: node_pb2.ModelStatus) -> None:
        for link in self.links:
            link.send(node_pb2.NodeMessage(model_status=status))

    async def handle_work(self, link: ApiLink, item: node_pb2.WorkItem) -> None:
        started = time.perf_counter()
        result = await self._execute(item)
        link.send(node_pb2.NodeMessage(result=result))
        self.metrics.work_time.labels(item.WhichOneof("operation") or "unknown").observe(
            time.perf_counter() - started
        )

    async def _execute(self, item: node_pb2.WorkItem) -> node_pb2.WorkResult:
        extra = {"request_id": item.request_id, "model": item.model.location}
        if self.draining:
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
                through = await self.models.learn(item.model, item.train_segment)
                return node_pb2.WorkResult(
                    request_id=item.request_id,
                    train_segment=node_pb2.TrainSegmentOutput(
                        seq=item.train_segment.seq, trained_through=through
                    ),
                )
            model = await self.models.get(item.model)
            return await _run_operation(model, item)
        except Unsupported as exc:
            return _error(item, node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED, str(exc))
        except (InputTooLong, ValueError) as exc:
            return _error(item, node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT, self._shown(exc))
        except (ManifestError, StoreError) as exc:
            log.warning("model unavailable for work", extra={**extra, "error": str(exc)})
            return _error(item, node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE, self._shown(exc))
        except Exception as exc:
            message = error_reference("the inference node failed", exc, log, extra)
            return _error(item, node_pb2.WORK_ERROR_CODE_INTERNAL, message)

    def _shown(self, exc: Exception) -> str:
        """A failure as the API service (and maybe its client) reads it: no store URL, path or
        credential of this node."""
        return redact(str(exc), self._secrets)

    def start_work(self, link: ApiLink, item: node_pb2.WorkItem) -> None:
        location = item.model.location
        self.models.hold(location)
        task = asyncio.create_task(self.handle_work(link, item))
        self.in_flight[item.request_id] = task
        session_work = link.session_work
        session_work.add(item.request_id)

        def done(_: asyncio.Task[None]) -> None:
            self.in_flight.pop(item.request_id, None)
            session_work.discard(item.request_id)
            self.models.release(location)

        task.add_done_callback(done)

    def cancel_work(self, request_id: str) -> None:
        task = self.in_flight.get(request_id)
        if task is not None:
            task.cancel()


class ApiLink:
    """The node session with one API service address, redialed whenever it drops."""

    def __init__(self, node: InferenceNode, address: str) -> None:
        self.node = node
        self.address = address
        self._outbox: asyncio.Queue[node_pb2.NodeMessage] | None = None
        self.heartbeat_interval_s = node.settings.api.heartbeat_interval_s
        self._loads: set[asyncio.Task[None]] = set()
        self.registered = False
        """Whether the current (or last) dial was welcomed by the API service."""
        self.session_work: set[str] = set()
        """Request ids of the work the current node session sent that is still running."""

    def send(self, message: node_pb2.NodeMessage) -> None:
        if self._outbox is not None:
            self._outbox.put_nowait(message)

    def send_heartbeat(self) -> None:
        stamp = Timestamp()
        stamp.GetCurrentTime()
        self.send(
            node_pb2.NodeMessage(
                heartbeat=node_pb2.Heartbeat(
                    sent_at=stamp,
                    free_slots=self.node.free_slots(),
                    memory_free_bytes=self.node.memory_free_bytes(),
                    draining=self.node.draining,
                    slots=self.node.settings.node.slots,
                    session_in_flight=len(self.session_work),
                )
            )
        )

    async def train_segments(
        self, ref: node_pb2.ModelRef, after_seq: int = 0
    ) -> tuple[list[node_pb2.TrainSegmentOp], int]:
        """`InferenceNodeApi.StreamTrainSegments` on this API service, as the node (its token), or
        the one-message `GetTrainSegments` of an API service that does not stream them."""
        tls = self.node.settings.node
        server_name = tls.tls_server_name or common_host_name(tls.api_addresses)
        request = node_pb2.GetTrainSegmentsRequest(model=ref, after_seq=after_seq)
        metadata = (("authorization", f"Bearer {tls.token or ''}"),)
        async with aio_client_channel(self.address, tls.tls_ca_file, server_name) as channel:
            stub = node_pb2_grpc.InferenceNodeApiStub(channel)
            segments: list[node_pb2.TrainSegmentOp] = []
            through = after_seq
            try:
                async for chunk in stub.StreamTrainSegments(
                    request, metadata=metadata, timeout=TRAIN_SEGMENTS_TIMEOUT_S
                ):
                    segments.extend(chunk.segments)
                    through = max(through, chunk.through)
                return segments, through
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED or segments:
                    raise
            response = await stub.GetTrainSegments(
                request, metadata=metadata, timeout=TRAIN_SEGMENTS_TIMEOUT_S
            )
        older = [s for s in response.segments if s.seq > after_seq]
        return older, max(after_seq, response.through, older[-1].seq if older else 0)

    async def say_goodbye(self, reason: str) -> None:
        if self._outbox is not None:
            self.send(node_pb2.NodeMessage(goodbye=node_pb2.Goodbye(reason=reason)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._outbox.join(), 5)

    async def run(self) -> None:
        backoff = 0.5
        while True:
            self.registered = False
            try:
                await self._session()
            except NodeRejected:
                raise
            except (grpc.aio.AioRpcError, ConnectionError, TimeoutError) as exc:
                detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
                log.warning("stream to API service dropped", extra={"api": self.address, "error": detail})
            if self.registered:
                backoff = 0.5  # the session that just ended was welcomed: a new outage starts afresh
            delay = backoff * random.uniform(0.5, 1.5)
            backoff = min(backoff * 2, REDIAL_MAX_S)
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        node = self.node
        token = node.settings.node.token or ""
        tls = node.settings.node
        server_name = tls.tls_server_name or common_host_name(tls.api_addresses)
        async with aio_client_channel(self.address, tls.tls_ca_file, server_name) as channel:
            stub = node_pb2_grpc.InferenceNodeApiStub(channel)
            call = stub.Connect(metadata=(("authorization", f"Bearer {token}"),))
            hello = node_pb2.Hello(
                protocol_version=PROTOCOL_VERSION,
                node_id=node.node_id,
                device=node.device_info(),
                free_slots=node.free_slots(),
                models=node.models.statuses(),
                software_version=VERSION,
                slots=node.settings.node.slots,
                families=[node_pb2.EngineFamily.ValueType(family(name).wire) for name in node.families],
            )
            await call.write(node_pb2.NodeMessage(hello=hello))
            first = await call.read()
            if first is grpc.aio.EOF:
                raise ConnectionError("the API service closed the stream before welcoming the node")
            assert isinstance(first, node_pb2.ApiMessage)
            if first.HasField("rejection"):
                rejection = first.rejection
                reason = node_pb2.RejectionReason.Name(rejection.reason)
                raise NodeRejected(f"{reason}: {rejection.message}")
            welcome = first.welcome
            if welcome.heartbeat_interval_ms:
                self.heartbeat_interval_s = welcome.heartbeat_interval_ms / 1000
            log.info(
                "registered with API service",
                extra={"api": self.address, "node_id": node.node_id, "session_id": welcome.session_id},
            )
            self.registered = True
            self.session_work = set()
            self._outbox = asyncio.Queue()
            tasks = [
                asyncio.create_task(self._write_loop(call)),
                asyncio.create_task(self._heartbeat_loop()),
            ]
            try:
                await self._read_loop(call)
            finally:
                self._outbox = None
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                raise ConnectionError("the API service closed the stream")
            assert isinstance(message, node_pb2.ApiMessage)
            kind = message.WhichOneof("body")
            if kind == "work":
                self.node.start_work(self, message.work)
            elif kind == "load_model":
                task = asyncio.create_task(self._load(message.load_model.model))
                self._loads.add(task)
                task.add_done_callback(self._loads.discard)
            elif kind == "unload_model":
                task = asyncio.create_task(self.node.models.unload(message.unload_model.model))
                self._loads.add(task)
                task.add_done_callback(self._loads.discard)
            elif kind == "cancel":
                self.node.cancel_work(message.cancel.request_id)
            elif kind == "catch_up":
                catch_up = message.catch_up
                task = asyncio.create_task(self.node.models.catch_up(catch_up.model, catch_up.through))
                self._loads.add(task)
                task.add_done_callback(self._loads.discard)
            elif kind == "drain":
                self.node.set_draining(True, message.drain.reason)
            elif kind == "undrain":
                self.node.set_draining(False)
            elif kind == "rejection":
                rejection = message.rejection
                reason = node_pb2.RejectionReason.Name(rejection.reason)
                raise NodeRejected(f"{reason}: {rejection.message}")

    async def _load(self, ref: node_pb2.ModelRef) -> None:
        with contextlib.suppress(Exception):  # the manager reports failures as MODEL_STATE_FAILED
            await self.node.models.get(ref)

    async def _write_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        outbox = self._outbox
        assert outbox is not None
        while True:
            message = await outbox.get()
            try:
                await call.write(message)
            finally:
                outbox.task_done()

    async def _heartbeat_loop(self) -> None:
        while True:
            self.send_heartbeat()
            await asyncio.sleep(self.heartbeat_interval_s)


def resolve_addresses(addresses: list[str]) -> list[str]:
    """Each `host:port` as every address its host resolves to; unresolvable ones stay as given
    (the link's redial reports the failure)."""
    resolved: list[str] = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            infos = []
        ips: list[str | None] = [str(info[4][0]) for info in infos] or [None]
        for ip in ips:
            one = address if ip is None else f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            if one not in resolved:
                resolved.append(one)
    return resolved


async def _run_operation(model: ServedModel, item: node_pb2.WorkItem) -> node_pb2.WorkResult:
    """One work item's operation on its model; what the model's family lacks raises `Unsupported`."""
    request_id = item.request_id
    match item.WhichOneof("operation"):
        case "word_graph":
            op = item.word_graph
            graph = await model.word_graph(
                op.segment, op.source_language, op.target_language, engine_id=item.model.engine_id
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
            )
            return node_pb2.WorkResult(
                request_id=request_id,
                translate=node_pb2.TranslateOutput(results=[result_to_wire(r) for r in results]),
            )
        case other:
            raise ValueError(f"unknown operation {other!r}")


def _error(item: node_pb2.WorkItem, code: int, message: str) -> node_pb2.WorkResult:
    return node_pb2.WorkResult(
        request_id=item.request_id,
        error=node_pb2.WorkError(code=code, message=message),  # type: ignore[arg-type]
    )
