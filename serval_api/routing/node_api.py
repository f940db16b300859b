"""`serval.inference.v1.InferenceNodeApi`: the stream each inference node dials.

The first message must be Hello; the node token travels as `authorization: Bearer <token>`.
A bad token or an incompatible protocol version gets a Rejection message and then the stream
ends with UNAUTHENTICATED or FAILED_PRECONDITION. A session that sends nothing (not even a
heartbeat) for `api.node_timeout_s` is closed and routing stops using it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

import grpc

from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeSession
from serval_common.settings import Settings

log = logging.getLogger(__name__)

SUPPORTED_PROTOCOL_VERSIONS = (node_pb2.PROTOCOL_VERSION_1,)

TokenVerifier = Callable[[str], Awaitable[bool]]


class NodeRecords(Protocol):
    """Where node sessions are recorded beyond this process (the database)."""

    async def opened(self, session: NodeSession, api_instance_id: str, software_version: str) -> None: ...

    async def closed(self, session: NodeSession) -> None: ...


class NodeApiServicer(node_pb2_grpc.InferenceNodeApiServicer):
    def __init__(
        self,
        registry: NodeRegistry,
        settings: Settings,
        verify_token: TokenVerifier,
        records: NodeRecords | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.verify_token = verify_token
        self.records = records
        self.instance_id = settings.api.instance_id or uuid.uuid4().hex[:8]

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        try:
            first = await self._read(context, self.settings.api.node_timeout_s)
        except TimeoutError:
            first = None
        if first is None or not first.HasField("hello"):
            await self._reject(
                context, node_pb2.REJECTION_REASON_BAD_HELLO, "the first message must be Hello"
            )
            return
        hello = first.hello
        if not await self.verify_token(_bearer_token(context)):
            await self._reject(context, node_pb2.REJECTION_REASON_BAD_TOKEN, "invalid or revoked node token")
            return
        if hello.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            await self._reject(
                context,
                node_pb2.REJECTION_REASON_INCOMPATIBLE_PROTOCOL,
                f"protocol version {hello.protocol_version} is not supported "
                f"(supported: {', '.join(map(str, SUPPORTED_PROTOCOL_VERSIONS))})",
            )
            return
        if not hello.node_id or hello.free_slots <= 0:
            await self._reject(
                context, node_pb2.REJECTION_REASON_BAD_HELLO, "Hello needs a node_id and free_slots > 0"
            )
            return

        session = NodeSession(
            session_id=uuid.uuid4().hex, node_id=hello.node_id, device=hello.device, slots=hello.free_slots
        )
        for status in hello.models:
            self.registry.set_model_state(session, status)
        await context.write(
            node_pb2.ApiMessage(
                welcome=node_pb2.Welcome(
                    protocol_version=node_pb2.PROTOCOL_VERSION_1,
                    session_id=session.session_id,
                    api_instance_id=self.instance_id,
                    heartbeat_interval_ms=int(self.settings.api.heartbeat_interval_s * 1000),
                )
            )
        )
        await self.registry.add(session)
        if self.records is not None:
            await self.records.opened(session, self.instance_id, hello.software_version)
        writer = asyncio.create_task(self._write_loop(session, context))
        silent = False
        reason = "stream ended"
        try:
            reason = await self._read_loop(session, context)
        except TimeoutError:
            silent = True
            reason = f"nothing heard for {self.settings.api.node_timeout_s:g} s"
        finally:
            writer.cancel()
            # The node usually hangs up right after Goodbye, which cancels this handler: the
            # bookkeeping must finish anyway.
            await asyncio.shield(self._forget(session, reason))
        if silent:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"node session closed: {reason}")

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
                await self.registry.notify()
            elif kind == "model_status":
                self.registry.set_model_state(session, message.model_status)
                await self.registry.notify()
            elif kind == "heartbeat":
                if message.heartbeat.draining != session.draining:
                    session.draining = message.heartbeat.draining
                    await self.registry.notify()
            elif kind == "goodbye":
                return f"goodbye: {message.goodbye.reason}"

    async def _write_loop(self, session: NodeSession, context: grpc.aio.ServicerContext) -> None:
        while True:
            await context.write(await session.outbox.get())

    @staticmethod
    async def _read(context: grpc.aio.ServicerContext, timeout_s: float) -> node_pb2.NodeMessage | None:
        """The next message; None when the node closed the stream; TimeoutError when it fell silent."""
        try:
            message = await asyncio.wait_for(context.read(), timeout_s)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            return None
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
