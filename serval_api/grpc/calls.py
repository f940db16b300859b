"""The one place gRPC handlers turn `ServalError` into a status, read credentials, refuse
request messages that do not parse, answer a dependency outage (database or model store down)
with UNAVAILABLE, and any other failure with INTERNAL and an error id (gRPC itself would send the
exception's text)."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError

from serval_api.auth import API_KEY_METADATA, Caller, authenticate, bearer_value
from serval_api.errors import INTERNAL_ERROR, ServalError, invalid_key, outage
from serval_api.routing.work import Served
from serval_api.service import Services
from serval_common.redact import error_reference
from serval_common.store import InvalidKey

log = logging.getLogger(__name__)

T = TypeVar("T")
Request = TypeVar("Request")


RETRY_AFTER_METADATA = "retry-after"
"""Trailing metadata of an error that says when to try again, in whole seconds (REST: `Retry-After`)."""


async def abort(context: grpc.aio.ServicerContext, error: ServalError) -> NoReturn:
    """End the call with `error`'s code and message, and when to retry where it says."""
    trailing: tuple[tuple[str, str], ...] = ()
    if error.retry_after_s is not None:
        trailing = ((RETRY_AFTER_METADATA, str(max(1, math.ceil(error.retry_after_s)))),)
    await context.abort(error.grpc_code, error.message, trailing_metadata=trailing)
    raise AssertionError("unreachable: abort raises")


async def run_call(context: grpc.aio.ServicerContext, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except ServalError as e:
        await abort(context, e)
    except InvalidKey as e:
        await abort(context, invalid_key(e))


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
        services.lookups.caller,
        bearer_token(context),
        services.jwt,
    )


class AuthenticatedServicer:
    """A servicer over `Services` whose `@grpc_call` methods are answered for an authenticated
    caller (`caller`: the word-alignment APIs widen its scopes)."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def caller(self, context: grpc.aio.ServicerContext) -> Caller:
        return await caller_of(self._services, context)


S = TypeVar("S", bound=AuthenticatedServicer)


def grpc_call(
    body: Callable[[S, Request, grpc.aio.ServicerContext, Caller], Awaitable[T]],
) -> Callable[[S, Request, grpc.aio.ServicerContext], Coroutine[Any, Any, T]]:
    """A unary servicer method from `body`, which is given the authenticated caller; refused
    credentials and the errors it raises end the call with their status (`run_call`)."""

    @functools.wraps(body)
    async def method(self: S, request: Request, context: grpc.aio.ServicerContext) -> T:
        async def call() -> T:
            return await body(self, request, context, await self.caller(context))

        return await run_call(context, call)

    return method


MODEL_REVISION_METADATA = "x-model-revision"


def served_by(context: grpc.aio.ServicerContext, served: Served[T]) -> T:
    """Send which model revision answered as trailing metadata (REST: `X-Model-Revision`)."""
    context.set_trailing_metadata(((MODEL_REVISION_METADATA, str(served.revision)),))
    return served.value


class _Undecodable:
    def __init__(self, error: DecodeError) -> None:
        self.message = f"the request is not a valid protobuf message of this method's type: {error}"


def _lenient(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as e:
            return _Undecodable(e)

    return parse


class UndecodableRequests(grpc.aio.ServerInterceptor):
    """A request message that does not parse answers INVALID_ARGUMENT, where gRPC itself would
    answer UNKNOWN; an unexpected exception answers INTERNAL with an error id, where gRPC would
    send its text. Bidirectional streams (the node stream) read and check their own messages."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}
        """Method → its wrapped handler: gRPC calls interceptors on every call, and the handler of
        a method never changes, so it is wrapped once."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = str(handler_call_details.method)
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        wrapped = self._wrap(handler, method)
        if wrapped is not handler:
            self._wrapped[method] = wrapped
        return wrapped

    @staticmethod
    def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        deserialize = _lenient(handler.request_deserializer)
        serialize = handler.response_serializer
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, method),
                request_deserializer=deserialize,
                response_serializer=serialize,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _server_stream(handler.unary_stream, method),
                request_deserializer=deserialize,
                response_serializer=serialize,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _client_stream(handler.stream_unary, method),
                request_deserializer=deserialize,
                response_serializer=serialize,
            )
        return handler


async def _refuse(context: grpc.aio.ServicerContext, request: Any) -> None:
    if isinstance(request, _Undecodable):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)


async def _failed(context: grpc.aio.ServicerContext, method: str, error: Exception) -> NoReturn:
    if isinstance(error, ServalError):
        await abort(context, error)
    elif (unavailable := outage(error, log, {"method": method})) is not None:
        await abort(context, unavailable)
    else:
        message = error_reference(INTERNAL_ERROR, error, log, {"method": method})
        await context.abort(grpc.StatusCode.INTERNAL, message)
    raise AssertionError("unreachable: abort raises") from error


def _unary(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _refuse(context, request)
        try:
            return await behavior(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _failed(context, method, e)

    return call


def _server_stream(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await _refuse(context, request)
        try:
            async for response in behavior(request, context):
                yield response
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _failed(context, method, e)

    return call


def _client_stream(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def call(requests: AsyncIterable[Any], context: grpc.aio.ServicerContext) -> Any:
        async def checked() -> AsyncIterator[Any]:
            async for request in requests:
                await _refuse(context, request)
                yield request

        try:
            return await behavior(checked(), context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _failed(context, method, e)

    return call
