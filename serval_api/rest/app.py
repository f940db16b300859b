"""The FastAPI application: routers plus the one mapping from `ServalError` to an HTTP answer."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from serval_api.errors import ServalError
from serval_api.metrics import ApiMetrics, RestMetricsMiddleware
from serval_api.rest import (
    admin,
    builds,
    corpora,
    downloads,
    engines,
    files,
    metrics,
    openapi,
    parallel_corpora,
    pretranslations,
    status,
    translation,
)
from serval_api.service import Services


def create_app(services: Services, api_metrics: ApiMetrics | None = None) -> FastAPI:
    app = FastAPI(title="Serval Live", version="1")
    app.state.services = services
    for module in (engines, builds, translation, status, admin, downloads, files, corpora, parallel_corpora):
        app.include_router(module.router)
    app.include_router(pretranslations.router)
    if api_metrics is not None:
        app.state.metrics = api_metrics
        app.add_middleware(RestMetricsMiddleware, metrics=api_metrics)
        if services.settings.api.metrics_enabled:
            app.include_router(metrics.router)
    openapi.install(app)
    app.add_exception_handler(ServalError, _serval_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    return app


async def _serval_error(_request: Request, error: ServalError) -> JSONResponse:
    headers = {}
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after_s)))
    return JSONResponse({"message": error.message}, status_code=error.http_status, headers=headers)


async def _validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        problems.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
    return JSONResponse({"message": "invalid request: " + "; ".join(problems)}, status_code=400)
