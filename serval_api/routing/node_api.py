"""`serval.inference.v1.InferenceNodeApi`: the stream each inference node dials.

The first message must be Hello; the node token travels as `authorization: Bearer <token>`.
A bad token or an incompatible protocol version gets a Rejection message and then the stream
ends with UNAUTHENTICATED or FAILED_PRECONDITION; so does a session whose token is revoked while
it runs (`NodeSession.kick`). A session that sends nothing (not even a heartbeat) for
`api.node_timeout_s` is closed and routing stops using it. A node an admin drained is told to
drain again whenever it reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError

from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.replay import ReplayRefused, SegmentReplay, TrainSegmentSource
from serval_api.routing.session import NodeSession
from serval_api.routing.work import ReplayStart
from serval_common import families
from serval_common.settings import Settings
from serval_common.stream_batches import api_messages, take_queued

log = logging.getLogger(__name__)

SUPPORTED_PROTOCOL_VERSIONS = (node_pb2.PROTOCOL_VERSION_2,)
"""Version 1 carried results in Serval's client messages; its nodes are refused with an upgrade hint."""
MAX_NODE_ID_CHARS = 200
MAX_SOFTWARE_VERSION_CHARS = 64


class BadFrame(Exception):
    """The node sent bytes that are not a NodeMessage."""


TokenVerifier = Callable[[str], Awaitable[str | None]]
"""A node token's id, or None when the token is unknown or revoked."""


class NodeRecords(Protocol):
    """Where node sessions are recorded beyond this process (the database)."""

    async def opened(self, session: NodeSession, api_instance_id: str) -> str | None:
        """Record the session; return the reason an admin drained the node, or None."""

    async def closed(self, session: NodeSession) -> None: ...


class NodeApiServicer(node_pb2_grpc.InferenceNodeApiServicer):
    def __init__(
        self,
        registry: NodeRegistry,
        settings: Settings,
        verify_token: TokenVerifier,
        records: NodeRecords | None = None,
        train_segments: TrainSegmentSource | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.verify_token = verify_token
        self.records = records
        self.replay = SegmentReplay(train_segments)
        self.instance_id = settings.api_instance_name
        self._forgetting: set[asyncio.Future[None]] = set()
        """Closed sessions' bookkeeping still being written (it outlives a cancelled handler)."""
        self._handlers: set[asyncio.Task[Any]] = set()
        """Running `Connect` handlers: each starts its session's bookkeeping as it ends."""

    async def wait_closed(self, timeout_s: float = 30.0) -> None:
        """Until every `Connect` handler (which the gRPC server's stop cancels, but may not await)
        has written its bookkeeping: a write cut off by the stop would leave SQLite locked."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self._handlers or self._forgetting:
                    await asyncio.gather(*self._handlers, *self._forgetting, return_exceptions=True)

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        if (handler := asyncio.current_task()) is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        try:
            first = await self._read(context, self.settings.api.node_timeout_s)
        except (TimeoutError, BadFrame):
            first = None
        if first is None or not first.HasField("hello"):
            await self._reject(
                context, node_pb2.REJECTION_REASON_BAD_HELLO, "the first message must be Hello"
            )
            return
        hello = first.hello
        token_id = await self.verify_token(_bearer_token(context))
        if token_id is None:
            await self._reject(context, node_pb2.REJECTION_REASON_BAD_TOKEN, "invalid or revoked node token")
            return
        if hello.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            await self._reject(
                context,
                node_pb2.REJECTION_REASON_INCOMPATIBLE_PROTOCOL,
                f"protocol version {hello.protocol_version} is not supported "
                f"(supported: {', '.join(map(str, SUPPORTED_PROTOCOL_VERSIONS))}); "
                "run the inference node of this API service's release",
            )
            return
        if (
            not hello.node_id
            or hello.slots < 0
            or (hello.free_slots if hello.slots == 0 else hello.slots) <= 0
        ):
            await self._reject(
                context,
                node_pb2.REJECTION_REASON_BAD_HELLO,
                "Hello needs a node_id and slots > 0 (or, without slots, free_slots > 0)",
            )
            return
        if len(hello.node_id) > MAX_NODE_ID_CHARS or "\x00" in hello.node_id:
            await self._reject(
                context,
                node_pb2.REJECTION_REASON_BAD_HELLO,
                f"node_id: at most {MAX_NODE_ID_CHARS} characters and no NUL",
            )
            return

        session = NodeSession(
            session_id=uuid.uuid4().hex,
            node_id=hello.node_id,
            device=hello.device,
            slots=hello.slots or hello.free_slots,
            token_id=token_id,
            software_version=_printable(hello.software_version, MAX_SOFTWARE_VERSION_CHARS),
            memory_free_bytes=hello.device.memory_free_bytes,
            families=hello_families(hello),
            batches=hello.batches,
        )
        if hello.slots > 0:
            # A node reconnecting with work still in flight has fewer slots free than it has.
            session.heard_capacity(hello.free_slots, hello.slots, session_in_flight=0)
        for status in hello.models:
            self.registry.set_model_state(session, status)
        # Known (recorded and routable) before the welcome: a node that has its welcome can be found
        # and controlled at once.
        if self.records is not None:
            drained = await self.records.opened(session, self.instance_id)
            if drained is not None:
                session.order_drain(True, drained)
        await self.registry.add(session)
        tasks: list[asyncio.Task[Any]] = []
        silent = False
        bad_frame: str | None = None
        reason = "stream ended"
        try:
            await context.write(
                node_pb2.ApiMessage(
                    welcome=node_pb2.Welcome(
                        protocol_version=node_pb2.PROTOCOL_VERSION_2,
                        session_id=session.session_id,
                        api_instance_id=self.instance_id,
                        heartbeat_interval_ms=int(self.settings.api.heartbeat_interval_s * 1000),
                        batches=True,
                    )
                )
            )
            reader = asyncio.create_task(self._read_loop(session, context))
            kicked = asyncio.create_task(session.kicked.wait())
            tasks = [asyncio.create_task(self._write_loop(session, context)), reader, kicked]
            await asyncio.wait([reader, kicked], return_when=asyncio.FIRST_COMPLETED)
            reason = reader.result() if reader.done() else session.kick_reason
        except TimeoutError:
            silent = True
            reason = f"nothing heard for {self.settings.api.node_timeout_s:g} s"
        except BadFrame as e:
            bad_frame = reason = str(e)
        finally:
            for task in tasks:
                task.cancel()
            # The node usually hangs up right after Goodbye, which cancels this handler: the
            # bookkeeping must finish anyway.
            forget = asyncio.ensure_future(self._forget(session, reason))
            self._forgetting.add(forget)
            forget.add_done_callback(self._forgetting.discard)
            await asyncio.shield(forget)
        if silent:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"node session closed: {reason}")
        if bad_frame is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"node session closed: {bad_frame}")
        if session.kicked.is_set():
            await self._reject(context, node_pb2.REJECTION_REASON_BAD_TOKEN, reason)

    async def GetTrainSegments(
        self, request: node_pb2.GetTrainSegmentsRequest, context: grpc.aio.ServicerContext
    ) -> node_pb2.GetTrainSegmentsResponse:
        """The same node token as Connect; the model by its location (or, without one, its engine
        id and revision). One message with every pair: kept for nodes of earlier releases."""
        return await self.replay.whole(await self._replay_start(request, context))

    async def StreamTrainSegments(
        self, request: node_pb2.GetTrainSegmentsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[node_pb2.TrainSegmentsChunk]:
        """As GetTrainSegments, in messages of at most about `CHUNK_BYTES`, read from the database a
        page at a time."""
        start = await self._replay_start(request, context)
        async for chunk in self.replay.chunks(start):
            yield chunk

    async def _replay_start(
        self, request: node_pb2.GetTrainSegmentsRequest, context: grpc.aio.ServicerContext
    ) -> ReplayStart:
        try:
            return await self.replay.start(request, await self.verify_token(_bearer_token(context)))
        except ReplayRefused as e:
            await context.abort(e.code, e.message)
            raise

    async def _forget(self, session: NodeSession, reason: str) -> None:
        await self.registry.remove(session, reason)
        if self.records is not None:
            await self.records.closed(session)

    async def _read_loop(self, session: NodeSession, context: grpc.aio.ServicerContext) -> str:
        while True:
            message = await self._read(context, self.settings.api.node_timeout_s)
            if message is None:
                return "the node closed the stream"
            session.last_seen = asyncio.get_running_loop().time()
            kind = message.WhichOneof("body")
            if kind == "result":
                session.resolve(message.result)
                await self.registry.notify(slots_only=True)
            elif kind == "results":
                for result in message.results.results:
                    session.resolve(result)
                await self.registry.notify(slots_only=True)
            elif kind == "model_status":
                self.registry.set_model_state(session, message.model_status)
                await self.registry.notify()
            elif kind == "heartbeat":
                beat = message.heartbeat
                session.last_heartbeat_at = datetime.now(UTC)
                had = session.free_slots
                session.heard_capacity(
                    beat.free_slots, beat.slots, beat.session_in_flight if beat.slots > 0 else None
                )
                session.memory_free_bytes = max(0, beat.memory_free_bytes)
                if session.heard_draining(beat.draining):
                    await self.registry.notify()
                elif session.free_slots > had:
                    await self.registry.notify(slots_only=True)
            elif kind == "goodbye":
                return f"goodbye: {message.goodbye.reason}"

    async def _write_loop(self, session: NodeSession, context: grpc.aio.ServicerContext) -> None:
        while True:
            queued = take_queued(session.outbox, await session.outbox.get())
            for message in api_messages(queued, batches=session.batches):
                await context.write(message)

    @staticmethod
    async def _read(context: grpc.aio.ServicerContext, timeout_s: float) -> node_pb2.NodeMessage | None:
        """The next message; None when the node closed the stream; TimeoutError when it fell silent.
        (`asyncio.timeout`, not `wait_for`, which would start a task for every message.)"""
        try:
            async with asyncio.timeout(timeout_s):
                message = await context.read()
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            return None
        except DecodeError as e:
            raise BadFrame(f"a frame is not a NodeMessage ({e})") from None
        if message is grpc.aio.EOF:
            return None
        assert isinstance(message, node_pb2.NodeMessage)
        return message

    @staticmethod
    async def _reject(
        context: grpc.aio.ServicerContext, reason: node_pb2.RejectionReason, message: str
    ) -> None:
        log.warning(
            "node rejected", extra={"reason": node_pb2.RejectionReason.Name(reason), "detail": message}
        )
        await context.write(
            node_pb2.ApiMessage(
                rejection=node_pb2.Rejection(
                    reason=reason, message=message, supported_protocol_versions=SUPPORTED_PROTOCOL_VERSIONS
                )
            )
        )
        code = {
            node_pb2.REJECTION_REASON_BAD_TOKEN: grpc.StatusCode.UNAUTHENTICATED,
            node_pb2.REJECTION_REASON_INCOMPATIBLE_PROTOCOL: grpc.StatusCode.FAILED_PRECONDITION,
        }.get(reason, grpc.StatusCode.INVALID_ARGUMENT)
        await context.abort(code, message)


def _bearer_token(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str) and value.lower().startswith("bearer "):
            return value[7:].strip()
    return ""


def _printable(text: str, max_chars: int) -> str:
    """What a node says about itself, as the nodes table can hold it."""
    return text.replace("\x00", "")[:max_chars]


def hello_families(hello: node_pb2.Hello) -> frozenset[str]:
    """The families a node claims; values this service does not know are ignored, and a node that
    claims none (an older node) serves `nmt`."""
    claimed = (families.of_wire(value) for value in hello.families)
    known = frozenset(f.name for f in claimed if f is not None)
    return known or frozenset({families.DEFAULT_NODE_FAMILY.name})
