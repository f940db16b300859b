"""Typed errors of the API service and the one place they map to HTTP and gRPC status codes.

Service functions raise these; the REST and gRPC adapters translate them with `http_status`
and `grpc_code` and never decide a status code themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypeVar

import grpc
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from serval_common.manifest import store_unavailable
from serval_common.redact import error_reference, redact
from serval_common.store import InvalidKey, error_chain

MAX_MESSAGE_CHARS = 500
"""An error message echoes client input; cut, it still fits gRPC's trailing metadata (8 KiB)."""


class ServalError(Exception):
    http_status: int = 500
    grpc_code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        message = redact(message, every_url=False)
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 1] + "…"
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class InvalidArgument(ServalError):
    http_status = 400
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class Unauthenticated(ServalError):
    http_status = 401
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ServalError):
    http_status = 403
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class MissingScope(PermissionDenied):
    """The credentials lack the scope a call needs: the message names the scope and how an
    administrator makes a key with it (the console and `serval admin nodes` show it as it is)."""

    def __init__(self, scope: str, *alternatives: str) -> None:
        self.scope = scope
        also = "".join(f" or {s!r}" for s in alternatives)
        super().__init__(
            f"this call needs the scope {scope!r}{also}; an administrator makes a key with it on the "
            f"server with `serval admin api-key create --owner <owner> --scope {scope}`"
        )


class NotFound(ServalError):
    http_status = 404
    grpc_code = grpc.StatusCode.NOT_FOUND


class NotSupported(ServalError):
    """The engine type cannot do this call."""

    http_status = 405
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class Timeout(ServalError):
    """A long poll ended without the awaited change."""

    http_status = 408
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class Conflict(ServalError):
    """The entity's state forbids the call (a build already running, an id taken)."""

    http_status = 409
    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class NotBuilt(Conflict):
    """Translate or word graph on an engine with no completed build."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class FailedPrecondition(Conflict):
    """The call needs a state the target is not in (a node draining, a revision not built yet)."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class PayloadTooLarge(ServalError):
    http_status = 413
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class RateLimited(ServalError):
    """A per-key limit is reached (`service/quotas.py`): 429 / RESOURCE_EXHAUSTED, with when to
    try again (REST `Retry-After`, gRPC `retry-after` trailing metadata, in seconds)."""

    http_status = 429
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class ClientClosedRequest(ServalError):
    """The caller went away before the answer was ready (nginx's 499); nobody reads this answer."""

    http_status = 499
    grpc_code = grpc.StatusCode.CANCELLED


class Unavailable(ServalError):
    """No inference capacity, or the work did not finish within its deadline."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE


def invalid_key(error: InvalidKey) -> InvalidArgument:
    """A model store key refused before anything was read or written: every client string that
    becomes part of a key is checked where it enters, so this is a last line, and it answers as
    the client's mistake (400 / INVALID_ARGUMENT) with the key quoted, never the store's location."""
    return InvalidArgument(str(error))


OUTAGE_RETRY_AFTER_S = 5.0
UNAVAILABLE_MESSAGE = "a necessary service is currently unavailable; try again later"


def outage(
    error: BaseException, logger: logging.Logger, ids: Mapping[str, object] | None = None
) -> Unavailable | None:
    """A dependency down rather than a bug: the database unreachable (connection refused or lost,
    its file unopenable, the pool exhausted) or the model store unreachable. Serval answers such
    a failure 503 (`ServiceUnavailableExceptionFilter`); so does this service, REST with
    `Retry-After` and gRPC UNAVAILABLE, the cause only in the log under an error id."""
    chain = list(error_chain(error))
    if any(_database_down(e) for e in chain):
        what = "the database"
    elif store_unavailable(error):
        what = "the model store"
    else:
        return None
    return concealed(
        Unavailable,
        UNAVAILABLE_MESSAGE,
        f"{what} is unavailable: {error!r}",
        logger,
        ids,
        retry_after_s=OUTAGE_RETRY_AFTER_S,
    )


def _database_down(error: BaseException) -> bool:
    if isinstance(error, OperationalError | InterfaceError | PoolTimeout):
        return True
    return isinstance(error, DBAPIError) and error.connection_invalidated


E = TypeVar("E", bound=ServalError)


def concealed(
    error_type: type[E],
    public: str,
    cause: BaseException | str,
    logger: logging.Logger,
    ids: Mapping[str, object] | None = None,
    *,
    retry_after_s: float | None = None,
) -> E:
    """An error whose client text is `public` and an error id; what went wrong (a store URL, a local
    path, a library's message) goes only to the log, under that id with `ids`."""
    return error_type(error_reference(public, cause, logger, ids or {}), retry_after_s=retry_after_s)


INTERNAL_ERROR = "internal error"
