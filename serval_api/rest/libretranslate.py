"""LibreTranslate's HTTP API (`/translate`, `/detect`, `/languages`, `/frontend/settings`,
`/translate_file`, `/health`), so tools written for LibreTranslate (libretranslatepy,
deep-translator, SubtitleEdit, browser extensions) translate here unchanged. docs/libretranslate.md
says how to point them at the service; `../shared/docs/libretranslate.md` is the contract.

- **Fields** come from a JSON body, a form body (urlencoded or multipart) or the query string,
  as LibreTranslate's clients send them (deep-translator sends everything as query parameters and
  no body; libretranslatepy sends a form body, even with its `GET /languages`). Body fields win
  over query fields of the same name.
- **The key** is the `api_key` field (or, for tools of this service, the `X-API-Key` header):
  missing → 400 `Please contact the server operator to get an API key` (LibreTranslate with
  required keys), wrong → 403 `Invalid API key`. Which model translates is the shared core's
  choice (`service.text_translation`): a key bound to an engine translates its pair, an unbound
  key any pair of the public base model.
- **Browsers**: answers carry LibreTranslate's CORS headers (any origin; the key travels in the
  request, never in a cookie) and `OPTIONS` answers a preflight, so a web page or extension can
  call the service from any site.
- **Errors** answer LibreTranslate's `{"error": "..."}` with its statuses (400 for anything wrong
  with the request, 403 for the key), not this service's `{"message"}`; 503 with Retry-After
  while the model loads; 429 with Retry-After over a per-key limit (docs/limits.md).

This module declares the routes and wraps each answer in the CORS headers and the error shape;
the rest of the dialect lies beside it: `libretranslate_protocol` (paths, messages, the error
shape, the OpenAPI description), `libretranslate_request` (reading fields and the key),
`libretranslate_handlers` (what each route answers, from the shared core) and
`libretranslate_codes` (language codes).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from serval_api.errors import ServalError
from serval_api.rest import libretranslate_handlers
from serval_api.rest.deps import ServicesDep
from serval_api.rest.libretranslate_protocol import (
    AUTO,
    CORS_HEADERS,
    DETECTION_SCHEMA,
    ERROR_SCHEMA,
    FILES_DISABLED,
    KEY_FIELD,
    LANGUAGES_SCHEMA,
    PATHS,
    SETTINGS_SCHEMA,
    TEXTS_SCHEMA,
    TRANSLATE_FIELDS,
    TRANSLATED_SCHEMA,
    error_answers,
    error_response,
    json_answer,
    query_parameters,
    request_body,
)

router = APIRouter(tags=["LibreTranslate"])

FRONTEND_TIMEOUT_MS = 500
"""LibreTranslate's default: how long its web page waits after a keystroke before translating."""


@router.post(
    "/translate",
    response_model=None,
    openapi_extra={
        "requestBody": request_body(TRANSLATE_FIELDS, ("q", "source", "target")),
        "parameters": query_parameters(list(TRANSLATE_FIELDS)),
        "x-auth": KEY_FIELD,
    },
    responses={
        200: json_answer(TRANSLATED_SCHEMA, "The translation(s)"),
        **error_answers(400, 403, 413, 429, 503),
    },
)
async def translate(request: Request, services: ServicesDep) -> Response:
    """Translate `q` (a text, or a list of texts answered as a list in the same order) from
    `source` (a code, or `auto`: `detectedLanguage` says what was detected) to `target`;
    `format: html` keeps the markup; `alternatives: N` adds N more whole translations."""
    return await _answer(libretranslate_handlers.translate(services, request))


@router.post(
    "/detect",
    response_model=None,
    openapi_extra={
        "requestBody": request_body({"q": TEXTS_SCHEMA, "api_key": {"type": "string"}}, ("q",)),
        "parameters": query_parameters(["q", "api_key"]),
        "x-auth": KEY_FIELD,
    },
    responses={
        200: json_answer(
            {"type": "array", "items": DETECTION_SCHEMA}, "Languages the text may be in, best first"
        ),
        **error_answers(400, 403, 413, 503),
    },
)
async def detect_language(request: Request, services: ServicesDep) -> Response:
    """The languages (among those the key translates from) `q` may be in, best first, with a
    confidence from 0 to 100."""
    return await _answer(libretranslate_handlers.detect_languages(services, request))


async def _languages_route(request: Request, services: ServicesDep) -> Response:
    """The languages the key translates from, each with the languages it translates it to
    (without a key: the public base model's, or none)."""
    return await _answer(libretranslate_handlers.languages(services, request))


for _method in ("GET", "POST"):
    router.add_api_route(
        "/languages",
        _languages_route,
        methods=[_method],
        response_model=None,
        name=f"languages_{_method.lower()}",
        openapi_extra={
            "parameters": query_parameters(["api_key"]),
            "x-auth": "optional: " + KEY_FIELD,
            **(
                {"requestBody": request_body({"api_key": {"type": "string"}}, ())}
                if _method == "POST"
                else {}
            ),
        },
        responses={200: json_answer(LANGUAGES_SCHEMA, "The languages"), **error_answers(400, 403, 413, 503)},
    )


@router.get(
    "/frontend/settings", response_model=None, responses={200: json_answer(SETTINGS_SCHEMA, "Settings")}
)
async def frontend_settings(services: ServicesDep) -> Response:
    """LibreTranslate's settings for its web page and for tools that read the limits."""
    return JSONResponse(
        {
            "charLimit": services.settings.api.max_text_chars,
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": True,
            "keyRequired": True,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {
                "source": {"code": AUTO, "name": "Auto Detect"},
                "target": {"code": "en", "name": "English"},
            },
        },
        headers=CORS_HEADERS,
    )


@router.post(
    "/translate_file",
    response_model=None,
    status_code=403,
    responses={403: json_answer(ERROR_SCHEMA, FILES_DISABLED)},
    openapi_extra={"x-auth": "none: refused to everyone"},
)
async def translate_file() -> Response:
    """Files are not translated here: LibreTranslate's answer for a server that turned it off
    (whatever is sent: LibreTranslate's multipart `file`, `source`, `target`, `api_key`)."""
    return JSONResponse({"error": FILES_DISABLED}, status_code=403, headers=CORS_HEADERS)


@router.get(
    "/health",
    response_model=None,
    responses={
        200: json_answer(
            {"type": "object", "properties": {"status": {"type": "string"}}}, "The service is up"
        )
    },
)
async def health() -> Response:
    """Liveness, as LibreTranslate answers it (this service's own report: `/api/v1/status/health`)."""
    return JSONResponse({"status": "ok"}, headers=CORS_HEADERS)


async def _preflight() -> Response:
    """A browser asks before it sends a JSON body or a header from another origin."""
    return Response(status_code=204, headers=CORS_HEADERS)


for _path in sorted(PATHS):
    router.add_api_route(
        _path, _preflight, methods=["OPTIONS"], include_in_schema=False, name=f"preflight {_path}"
    )


async def _answer(work: Awaitable[Any]) -> Response:
    """The handler's answer with CORS headers, or its error in LibreTranslate's shape."""
    try:
        result = await work
    except ServalError as error:
        return error_response(error)
    response = result if isinstance(result, Response) else JSONResponse(result)
    response.headers.update(CORS_HEADERS)
    return response


__all__ = ["router"]
