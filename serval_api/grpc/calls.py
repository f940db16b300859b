"""The one place gRPC handlers turn `ServalError` into a status, and read credentials."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from serval_api.auth import API_KEY_METADATA, Caller, authenticate, bearer_value
from serval_api.errors import ServalError
from serval_api.routing.work import Served
from serval_api.service import Services
from serval_api.service.keys import authenticate_api_key

T = TypeVar("T")


async def run_call(context: grpc.aio.ServicerContext, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except ServalError as e:
        await context.abort(e.grpc_code, e.message)
        raise AssertionError("unreachable: abort raises") from e


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k.lower() == key:
            return v if isinstance(v, str) else v.decode()
    return None


def bearer_token(context: grpc.aio.ServicerContext) -> str | None:
    return bearer_value(metadata_value(context, "authorization"))


async def caller_of(services: Services, context: grpc.aio.ServicerContext) -> Caller:
    return await authenticate(
        metadata_value(context, API_KEY_METADATA),
        lambda key: authenticate_api_key(services.db, key),
        bearer_token(context),
        services.jwt,
    )


MODEL_REVISION_METADATA = "x-model-revision"


def served_by(context: grpc.aio.ServicerContext, served: Served[T]) -> T:
    """Send which model revision answered as trailing metadata (REST: `X-Model-Revision`)."""
    context.set_trailing_metadata(((MODEL_REVISION_METADATA, str(served.revision)),))
    return served.value
