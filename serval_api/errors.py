"""Typed errors of the API service and the one place they map to HTTP and gRPC status codes.

Service functions raise these; the REST and gRPC adapters translate them with `http_status`
and `grpc_code` and never decide a status code themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypeVar

import grpc

from serval_common.redact import error_reference, redact
from serval_common.store import InvalidKey

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
