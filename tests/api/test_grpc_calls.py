"""`@grpc_call` on a real grpc.aio server: the caller is authenticated before the body runs, the
service errors the body raises end the call with their status, and served-by travels as trailing
metadata."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import cast

import grpc
import pytest
from google.protobuf import empty_pb2

from serval_api.auth import Caller
from serval_api.errors import NotFound
from serval_api.grpc.calls import MODEL_REVISION_METADATA, AuthenticatedServicer, grpc_call, served_by
from serval_api.routing.work import Served
from serval_api.service import Services

KEY = "secret-key"
SERVICE = "test.Calls"


async def _lookup(key: str) -> Caller | None:
    return Caller(owner="owner-1") if key == KEY else None


class Calls(AuthenticatedServicer):
    @grpc_call
    async def Answer(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext, caller: Caller
    ) -> empty_pb2.Empty:
        assert caller.owner == "owner-1"  # otherwise the call fails with UNKNOWN
        return served_by(context, Served(empty_pb2.Empty(), revision=7))

    @grpc_call
    async def Missing(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext, caller: Caller
    ) -> empty_pb2.Empty:
        raise NotFound("engine e-1 does not exist")


def _run(check: Callable[[grpc.aio.Channel], Awaitable[None]]) -> None:
    async def main() -> None:
        services = cast(Services, SimpleNamespace(lookups=SimpleNamespace(caller=_lookup), jwt=None))
        servicer = Calls(services)
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                getattr(servicer, name),
                request_deserializer=empty_pb2.Empty.FromString,
                response_serializer=empty_pb2.Empty.SerializeToString,
            )
            for name in ("Answer", "Missing")
        }
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await check(channel)
        finally:
            await server.stop(None)

    asyncio.run(main())


def _method(channel: grpc.aio.Channel, name: str) -> grpc.aio.UnaryUnaryMultiCallable:
    return channel.unary_unary(
        f"/{SERVICE}/{name}",
        request_serializer=empty_pb2.Empty.SerializeToString,
        response_deserializer=empty_pb2.Empty.FromString,
    )


def test_the_caller_is_authenticated_and_served_by_is_recorded() -> None:
    async def check(channel: grpc.aio.Channel) -> None:
        call = _method(channel, "Answer")(empty_pb2.Empty(), metadata=(("x-api-key", KEY),))
        await call
        trailing = dict(await call.trailing_metadata() or ())
        assert trailing[MODEL_REVISION_METADATA] == "7"

    _run(check)


def test_missing_credentials_are_refused_before_the_body_runs() -> None:
    async def check(channel: grpc.aio.Channel) -> None:
        for metadata in ((), (("x-api-key", "wrong"),)):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _method(channel, "Missing")(empty_pb2.Empty(), metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    _run(check)


def test_a_service_error_ends_the_call_with_its_status() -> None:
    async def check(channel: grpc.aio.Channel) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await _method(channel, "Missing")(empty_pb2.Empty(), metadata=(("x-api-key", KEY),))
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
        assert failed.value.details() == "engine e-1 does not exist"

    _run(check)
