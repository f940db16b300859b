"""The FastAPI application: routers plus the one mapping from `ServalError` to an HTTP answer;
a dependency outage (database or model store down) answers 503 with `Retry-After`, any other
exception 500 with an error id, its text only in the log."""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.utils import is_body_allowed_for_status_code
from fastapi_offline import FastAPIOffline
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serval_api.errors import INTERNAL_ERROR, PayloadTooLarge, ServalError, invalid_key, outage
from serval_api.metrics import ApiMetrics, RestMetricsMiddleware
from serval_api.rest import (
    admin_console,
    admin_credentials,
    admin_nodes,
    api_keys,
    builds,
    builds_feed,
    confidences,
    corpora,
    downloads,
    engine_corpora,
    engines,
    files,
    hooks,
    libretranslate,
    libretranslate_protocol,
    metrics,
    openapi,
    parallel_corpora,
    pretranslations,
    sil_converters,
    status,
    translation,
    word_alignment,
    word_alignment_builds,
)
from serval_api.service import Services
from serval_api.web import router as web_pages
from serval_common.redact import error_reference
from serval_common.store import InvalidKey

log = logging.getLogger(__name__)

DOCS_ASSETS_PATH = "/docs-assets"


def create_app(services: Services, api_metrics: ApiMetrics | None = None) -> FastAPI:
    # The API reference (/docs) loads Swagger UI from this service, never from a CDN: a deployment
    # may have no internet, and the web pages take nothing from another site. No /redoc: ReDoc
    # fetches its logo from redoc.ly.
    app = FastAPIOffline(
        title="Serval Live",
        version="1",
        static_url=DOCS_ASSETS_PATH,
        redoc_url=None,
        swagger_ui_parameters={"validatorUrl": None},  # Swagger UI would post the schema to swagger.io
    )
    app.state.services = services
    for module in (
        builds_feed,
        engines,
        builds,
        translation,
        status,
        admin_credentials,
        admin_nodes,
        admin_console,
        downloads,
        files,
        corpora,
        parallel_corpora,
    ):
        app.include_router(module.router)
    app.include_router(engine_corpora.router)
    app.include_router(pretranslations.router)
    app.include_router(confidences.router)
    app.include_router(hooks.router)
    app.include_router(api_keys.router)
    app.include_router(word_alignment.router)
    app.include_router(word_alignment_builds.router)
    app.include_router(libretranslate.router)
    app.include_router(web_pages)  # the playground at `/`, the console at `/admin` (docs/web-pages.md)
    app.add_middleware(InternalErrors)
    app.add_middleware(BodyLimit, max_bytes=services.settings.api.max_request_bytes)
    sil_converters.install(app)  # its routes, and its error shape around the middleware above
    if api_metrics is not None:
        app.state.metrics = api_metrics
        app.add_middleware(RestMetricsMiddleware, metrics=api_metrics)
        if services.settings.api.metrics_enabled:
            app.include_router(metrics.router)
    openapi.install(app)
    app.add_exception_handler(ServalError, _serval_error)  # type: ignore[arg-type]
    app.add_exception_handler(InvalidKey, _invalid_key)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    return app


class InternalErrors:
    """An exception no handler turned into an answer: 500 with an error id, its text in the log.
    Answered here rather than by Starlette's last-resort handler, which re-raises and so closes
    the client's keep-alive connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            if started:
                raise
            ids = {k: v for k, v in scope.get("path_params", {}).items() if k.endswith("_id")}
            ids.update(method=scope.get("method"), route=getattr(scope.get("route"), "path", None))
            unavailable = outage(error, log, ids)
            if unavailable is not None:
                await _error_response(unavailable, scope["path"])(scope, receive, send)
                return
            message = error_reference(INTERNAL_ERROR, error, log, ids)
            shape = "error" if scope["path"] in libretranslate_protocol.PATHS else "message"
            await JSONResponse({shape: message}, status_code=500)(scope, receive, send)


class BodyLimit:
    """A request body over `max_bytes` answers 413 before any handler reads it. File uploads
    stream to disk under their own limit (`api.max_upload_bytes`) and pass through."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(files.router.prefix):
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLarge(f"the request body is larger than the limit of {self.max_bytes} bytes")
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _error_response(too_large, scope["path"])(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await _error_response(too_large, scope["path"])(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


def _error_response(error: ServalError, path: str = "") -> JSONResponse:
    """`error` in Serval's shape, or in LibreTranslate's on its routes."""
    if path in libretranslate_protocol.PATHS:
        return libretranslate_protocol.error_response(error)
    headers = {}
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return JSONResponse({"message": error.message}, status_code=error.http_status, headers=headers)


async def _serval_error(_request: Request, error: ServalError) -> JSONResponse:
    return _error_response(error)


async def _invalid_key(_request: Request, error: InvalidKey) -> JSONResponse:
    return _error_response(invalid_key(error))


async def _http_error(request: Request, error: HTTPException) -> Response:
    """FastAPI's own answers (no such route, a body it cannot parse) in this service's error shape
    (LibreTranslate's on its routes: a wrong method there answers `{"error"}`)."""
    if not is_body_allowed_for_status_code(error.status_code):
        return Response(status_code=error.status_code, headers=error.headers)
    shape = "error" if request.url.path in libretranslate_protocol.PATHS else "message"
    return JSONResponse({shape: error.detail}, status_code=error.status_code, headers=error.headers)


async def _validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        problems.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
    return JSONResponse({"message": "invalid request: " + "; ".join(problems)}, status_code=400)
