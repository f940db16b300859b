"""The served OpenAPI document: every error a route can answer is documented with the `Error`
body, FastAPI's 422 becomes the 400 this service really answers, and the document is also served
where Serval serves its own (`/swagger/v1/swagger.json`)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from serval_api.rest.protocol import Error

DESCRIPTIONS = {
    400: "The request is malformed or a value is invalid",
    401: "Credentials are missing or invalid",
    403: "The credentials lack the scope, or the entity belongs to another owner",
    404: "The entity does not exist",
    405: "The engine type cannot do this call",
    408: "The long poll ended before the awaited revision; poll again",
    409: "The entity's state forbids the call (no model yet, a build already running)",
    413: "The request body is too large",
    503: "No inference capacity right now; retry (see Retry-After)",
}
SWAGGER_PATH = "/swagger/v1/swagger.json"


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": Error, "description": DESCRIPTIONS[code]} for code in codes}


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            _document_common_errors(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    async def swagger() -> JSONResponse:
        return JSONResponse(app.openapi())

    app.add_api_route(SWAGGER_PATH, swagger, include_in_schema=False)


def _document_common_errors(schema: dict[str, Any]) -> None:
    error_ref = {"$ref": "#/components/schemas/Error"}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Error", Error.model_json_schema())
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    for operation in _operations(schema):
        responses: dict[str, Any] = operation.setdefault("responses", {})
        responses.pop("422", None)
        params = operation.get("parameters", [])
        codes = set()
        if params or "requestBody" in operation:
            codes.add(400)
        if any(p["in"] == "header" and p["name"].lower() == "x-api-key" for p in params):
            codes |= {401, 403}
        if any(p["in"] == "path" for p in params):
            codes.add(404)
        for code in sorted(codes):
            responses.setdefault(
                str(code),
                {"description": DESCRIPTIONS[code], "content": {"application/json": {"schema": error_ref}}},
            )


def _operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        operation
        for path in schema.get("paths", {}).values()
        for method, operation in path.items()
        if method in ("get", "put", "post", "patch", "delete")
    ]
