"""The node session with one API service address (`ApiLink`): dialing `InferenceNodeApi/Connect`
with the node token, saying hello, being welcomed or rejected, then writing the node's messages
(heartbeats, model statuses, results) and handing every message the API service sends to the node;
redialed with exponential backoff and jitter whenever the stream drops. It also fetches an engine's
trained segments from its address (`train_segments`).

It stands apart from `inference_gpu.node` because it is the transport only: the link is handed
what it says (the node's hello and heartbeat) and where each message goes (`handle`); what the
node does with a message is the node's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

import grpc

from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_common.settings import Settings
from serval_common.stream_batches import node_messages, take_queued
from serval_common.tls import aio_client_channel, common_host_name

log = logging.getLogger("inference_gpu.node")
"""The node's logger: these records are the node's."""

REDIAL_MAX_S = 5.0
"""The longest pause between redials (before jitter): a restarted API replica gets its nodes back
within seconds, and a dial attempt costs the API service next to nothing."""


TRAIN_SEGMENTS_TIMEOUT_S = 120.0
"""How long a node waits for an API service's trained segments (streamed, however many) when it
loads or catches up a model."""


class NodeRejected(Exception):
    """The API service refused this node (bad token, incompatible protocol): redialing won't help."""


class ApiLink:
    """The node session with one API service address, redialed whenever it drops."""

    def __init__(
        self,
        address: str,
        settings: Settings,
        *,
        hello: Callable[[], node_pb2.Hello],
        heartbeat: Callable[[], node_pb2.Heartbeat],
        handle: Callable[[ApiLink, node_pb2.ApiMessage], None],
    ) -> None:
        self.address = address
        self.settings = settings
        self._hello = hello
        """The node's hello, made afresh at each dial."""
        self._heartbeat = heartbeat
        """The node's side of a heartbeat (slots, memory, draining); the link adds the rest."""
        self._handle = handle
        """Where every message of the API service but a rejection goes."""
        self._outbox: asyncio.Queue[node_pb2.NodeMessage | node_pb2.WorkResult] | None = None
        self.batches = False
        """Whether the API service of the current session reads `WorkResults` (its Welcome said so)."""
        self.heartbeat_interval_s = settings.api.heartbeat_interval_s
        self.registered = False
        """Whether the current (or last) dial was welcomed by the API service."""
        self.session_work: set[str] = set()
        """Request ids of the work the current node session sent that is still running."""

    def send(self, message: node_pb2.NodeMessage | node_pb2.WorkResult) -> None:
        """Queue a message (a bare `WorkResult` is a result) for the API service."""
        if self._outbox is not None:
            self._outbox.put_nowait(message)

    def send_heartbeat(self) -> None:
        heartbeat = self._heartbeat()
        heartbeat.sent_at.GetCurrentTime()
        heartbeat.session_in_flight = len(self.session_work)
        self.send(node_pb2.NodeMessage(heartbeat=heartbeat))

    def _channel(self) -> grpc.aio.Channel:
        node = self.settings.node
        server_name = node.tls_server_name or common_host_name(node.api_addresses)
        return aio_client_channel(self.address, node.tls_ca_file, server_name)

    def _metadata(self) -> tuple[tuple[str, str]]:
        return (("authorization", f"Bearer {self.settings.node.token or ''}"),)

    async def train_segments(
        self, ref: node_pb2.ModelRef, after_seq: int = 0
    ) -> tuple[list[node_pb2.TrainSegmentOp], int]:
        """`InferenceNodeApi.StreamTrainSegments` on this API service, as the node (its token), or
        the one-message `GetTrainSegments` of an API service that does not stream them."""
        request = node_pb2.GetTrainSegmentsRequest(model=ref, after_seq=after_seq)
        metadata = self._metadata()
        async with self._channel() as channel:
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
        async with self._channel() as channel:
            stub = node_pb2_grpc.InferenceNodeApiStub(channel)
            call = stub.Connect(metadata=self._metadata())
            hello = self._hello()
            await call.write(node_pb2.NodeMessage(hello=hello))
            first = await _receive(call, "the API service closed the stream before welcoming the node")
            welcome = first.welcome
            if welcome.heartbeat_interval_ms:
                self.heartbeat_interval_s = welcome.heartbeat_interval_ms / 1000
            log.info(
                "registered with API service",
                extra={"api": self.address, "node_id": hello.node_id, "session_id": welcome.session_id},
            )
            self.registered = True
            self.batches = welcome.batches
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
            self._handle(self, await _receive(call, "the API service closed the stream"))

    async def _write_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        outbox = self._outbox
        assert outbox is not None
        while True:
            queued = take_queued(outbox, await outbox.get())
            try:
                for message in node_messages(queued, batches=self.batches):
                    await call.write(message)
            finally:
                for _ in queued:
                    outbox.task_done()

    async def _heartbeat_loop(self) -> None:
        while True:
            self.send_heartbeat()
            await asyncio.sleep(self.heartbeat_interval_s)


async def _receive(call: grpc.aio.StreamStreamCall, closed: str) -> node_pb2.ApiMessage:
    """The API service's next message on the node session. A closed stream raises `ConnectionError`
    (with `closed` for its message) and a rejection `NodeRejected`: the link redials after the one,
    never after the other."""
    message = await call.read()
    if message is grpc.aio.EOF:
        raise ConnectionError(closed)
    assert isinstance(message, node_pb2.ApiMessage)
    if message.HasField("rejection"):
        rejection = message.rejection
        raise NodeRejected(f"{node_pb2.RejectionReason.Name(rejection.reason)}: {rejection.message}")
    return message
