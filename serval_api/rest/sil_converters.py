"""SIL Converters' NLLB Translator dialect: `POST /api/v1/translate/` and
`GET /api/v1/translate/languages/`, as the converter sends them and reads the answers
(`../shared/docs/sil-converters.md`, `docs/sil-converters.md`).

- **Paths.** The converter always asks for the slashed paths; they answer directly, and so do the
  slashless ones (hidden from the OpenAPI document): no route of this dialect redirects, since a
  307 on a POST through WinHTTP is untested.
- **Credentials.** `Authorization: SIL-NLLB-Auth-Key <API key>` (the converter's own scheme), or
  this service's `X-API-Key` or `Authorization: Bearer <JWT>`. Missing or wrong, the answer is
  `401 {"error": "Unauthorized"}`, the reference server's, whose word the converter recognises.
- **Which model answers** is `text_translation`'s: a key bound to an engine, that engine; any
  other key, the public base model.
- **Errors are shown to the translator as the translation.** The converter turns any non-2xx
  body into the text it puts in the document, so every error here is `{"error": "<one sentence
  that says what to do>"}`, never an id, path or URL, and nothing a client sends answers 5xx.
  The body is read here rather than by FastAPI so that malformed JSON, another content type or
  bytes that are not UTF-8 get such a sentence too. `TranslatorErrors` does the same for what
  answers before or around these handlers (the body limit's 413, an internal error's 500, a
  database outage's 503, a wrong method's 405).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serval_api.auth import READ_ENGINES, Caller, authenticate, bearer_value
from serval_api.errors import (
    InvalidArgument,
    PermissionDenied,
    ServalError,
    Unauthenticated,
    Unavailable,
)
from serval_api.rest.deps import ServicesDep
from serval_api.rest.disconnect import while_connected
from serval_api.rest.wire import Model
from serval_api.service import text_translation
from serval_api.service.context import Services

TRANSLATE_PATH = "/api/v1/translate/"
LANGUAGES_PATH = "/api/v1/translate/languages/"
PATH_PREFIX = "/api/v1/translate"
AUTH_SCHEME = "SIL-NLLB-Auth-Key"

UNAUTHORIZED = "Unauthorized"
"""The reference server's word for a missing or wrong key: the converter then tells the
translator where to enter one."""
FORBIDDEN = (
    "Unauthorized: this API key may not translate; ask the administrator for a key with the "
    f"{READ_ENGINES} scope."
)
NOT_JSON = 'The request is not valid JSON; send {"sourceLanguage": …, "targetLanguage": …, "text": …}.'
NOT_AN_OBJECT = "Send sourceLanguage, targetLanguage and text as text in one JSON object."
NOT_UTF8 = "The request is not UTF-8 text; send the text as UTF-8."
NOT_UNICODE = "The text contains characters that are not valid Unicode; remove them."
HAS_NUL = "The text contains a NUL character; remove it."
WRONG_CONTENT_TYPE = "Send the request as JSON (Content-Type: application/json)."
FALLBACK = {
    400: "This service did not understand the request; send sourceLanguage, targetLanguage and text as JSON.",
    401: UNAUTHORIZED,
    403: FORBIDDEN,
    404: "There is nothing at this address; set the converter's endpoint to the server's address only.",
    405: "This address does not take that kind of request; use the NLLB Translator converter.",
    413: "The text is too long to send in one request; send it in smaller parts.",
    415: WRONG_CONTENT_TYPE,
    503: "The translation service is unavailable right now; try again in a minute.",
}
INTERNAL = (
    "The translation service had an internal error; try again, and tell the administrator if it persists."
)

FIELDS = ("sourceLanguage", "targetLanguage", "text")


class SilTranslateRequest(Model):
    """What the converter sends (Newtonsoft, camelCase; names are matched case-insensitively)."""

    source_language: str
    target_language: str
    text: str


class SilTranslation(Model):
    original_text: str
    translated_text: str


class SilError(Model):
    error: str


DESCRIPTIONS = {
    400: "An unknown language, no text, text too long, malformed JSON, or no model for this key",
    401: 'No key or a wrong one: `{"error": "Unauthorized"}`',
    403: "The key lacks the read:translation_engines scope",
    413: "The request body is larger than `api.max_request_bytes`",
    415: "The body is not JSON",
    429: "The key made too many requests this minute; try again after Retry-After",
    503: "The model is loading or no node is serving; try again after Retry-After",
}


def _responses(*codes: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """`described`: `e400="…"` instead of the general description of 400."""
    return {
        code: {"model": SilError, "description": described.get(f"e{code}", DESCRIPTIONS[code])}
        for code in codes
    }


router = APIRouter(tags=["SIL Converters"])

AuthorizationHeader = Annotated[
    str | None,
    Header(
        alias="Authorization",
        description=f"`{AUTH_SCHEME} <API key>`, as SIL Converters sends it (or `Bearer <JWT>`)",
    ),
]
ApiKeyHeader = Annotated[str | None, Header(alias="X-API-Key", description="An API key, instead")]


@router.post(
    TRANSLATE_PATH,
    summary="Translate text (SIL Converters' NLLB Translator)",
    response_model=SilTranslation,
    responses=_responses(400, 401, 403, 413, 415, 429, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": SilTranslateRequest.model_json_schema()}},
        }
    },
)
async def translate(
    request: Request,
    services: ServicesDep,
    authorization: AuthorizationHeader = None,
    x_api_key: ApiKeyHeader = None,
) -> JSONResponse:
    """Translate a sentence or a paragraph (split into sentences, translated as one batch, joined
    with the original whitespace) with the model the key names (see docs/sil-converters.md)."""
    caller: Caller | None = None
    try:
        caller = await _caller(services, authorization, x_api_key)
        source, target, text = _read_request(request.headers, await request.body())
        answer = await while_connected(
            request, text_translation.translate_text(services, caller, source, target, text)
        )
    except ServalError as error:
        return _error_answer(error, caller)
    return JSONResponse({"originalText": text, "translatedText": answer.translation})


@router.get(
    LANGUAGES_PATH,
    summary="Languages (SIL Converters' NLLB Translator)",
    response_model=list[str],
    responses=_responses(
        400, 401, 403, 503, e400="No model for this key: the public base model is off or unpublished"
    ),
)
async def languages(
    services: ServicesDep,
    authorization: AuthorizationHeader = None,
    x_api_key: ApiKeyHeader = None,
) -> JSONResponse:
    """The FLORES-200 codes the key translates between: every code of the public base model, or
    a bound engine's two."""
    caller: Caller | None = None
    try:
        caller = await _caller(services, authorization, x_api_key)
        codes = await text_translation.languages(services, caller)
    except ServalError as error:
        return _error_answer(error, caller)
    return JSONResponse(list(codes))


router.add_api_route(TRANSLATE_PATH.rstrip("/"), translate, methods=["POST"], include_in_schema=False)
router.add_api_route(LANGUAGES_PATH.rstrip("/"), languages, methods=["GET"], include_in_schema=False)


def install(app: FastAPI) -> None:
    """Add the routes and `TranslatorErrors`. Call it after the body limit and the internal-error
    middleware are added, so that `TranslatorErrors` wraps them."""
    app.include_router(router)
    app.add_middleware(TranslatorErrors)


def is_dialect_path(path: str) -> bool:
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


async def _caller(services: Services, authorization: str | None, x_api_key: str | None) -> Caller:
    return await authenticate(
        _sil_key(authorization) or x_api_key,
        services.lookups.caller,
        bearer_value(authorization),
        services.jwt,
    )


def _sil_key(authorization: str | None) -> str | None:
    """The key of `Authorization: SIL-NLLB-Auth-Key <key>` (scheme matched case-insensitively)."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    if scheme.lower() != AUTH_SCHEME.lower():
        return None
    return key.strip() or None


def _read_request(headers: Headers, body: bytes) -> tuple[str, str, str]:
    """(source code, target code, text) of the converter's JSON body, or `InvalidArgument` with a
    sentence the translator can act on; `UnsupportedMediaType` for a body that is not JSON."""
    content_type = headers.get("content-type")
    if content_type is not None:
        media = content_type.partition(";")[0].strip().lower()
        if media not in ("application/json", "text/json") and not media.endswith("+json"):
            raise UnsupportedMediaType(WRONG_CONTENT_TYPE)
    try:
        decoded = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidArgument(NOT_UTF8) from None
    try:
        value = json.loads(decoded)
    except (ValueError, RecursionError):
        raise InvalidArgument(NOT_JSON) from None
    if not isinstance(value, dict):
        raise InvalidArgument(NOT_AN_OBJECT)
    by_name = {str(name).lower(): field for name, field in value.items()}
    fields = [by_name.get(name.lower()) for name in FIELDS]
    if not all(isinstance(field, str) for field in fields):
        raise InvalidArgument(NOT_AN_OBJECT)
    source, target, text = (str(field) for field in fields)
    for field in (source, target, text):
        try:
            field.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, which JSON's \u escapes can carry
            raise InvalidArgument(NOT_UNICODE) from None
        if "\x00" in field:
            raise InvalidArgument(HAS_NUL)
    return source, target, text


class UnsupportedMediaType(ServalError):
    http_status = 415


def _error_answer(error: ServalError, caller: Caller | None) -> JSONResponse:
    """`{"error": sentence}` with the error's status (and Retry-After). The shared core's
    messages are written for translators; any other message that could name an id (an engine's,
    an error reference) gives way to the status's general sentence."""
    status = error.http_status
    engine_id = caller.engine_id if caller is not None else None
    if isinstance(error, Unauthenticated):
        message = UNAUTHORIZED
    elif isinstance(error, PermissionDenied):
        message = FORBIDDEN
    elif "error id" in error.message or (engine_id and engine_id in error.message):
        message = FALLBACK.get(status, INTERNAL)
    else:
        message = error.message
    headers = {}
    retry_after_s = error.retry_after_s
    if retry_after_s is None and isinstance(error, Unavailable):
        retry_after_s = text_translation.LOADING_RETRY_AFTER_S
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(retry_after_s)))
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class TranslatorErrors:
    """Every error answer on this dialect's paths in its shape: one that is not already
    `{"error": …}` (FastAPI's 404 and 405, the body limit's 413, the internal-error handler's 500
    with its error id, an outage's 503) is replaced by the status's general sentence; Retry-After
    is kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_dialect_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        body = bytearray()

        async def watched(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                await _send_in_shape(held, bytes(body), send)

        await self.app(scope, receive, watched)


async def _send_in_shape(start: Message, body: bytes, send: Send) -> None:
    status: int = start["status"]
    if _is_in_shape(body):
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    retry_after = Headers(raw=start.get("headers", [])).get("retry-after")
    message = FALLBACK.get(status, INTERNAL if status >= 500 else FALLBACK[400])
    answer = JSONResponse({"error": message}, status_code=status)
    if retry_after is not None:
        answer.headers["Retry-After"] = retry_after
    await send({"type": "http.response.start", "status": status, "headers": answer.raw_headers})
    await send({"type": "http.response.body", "body": answer.body})


def _is_in_shape(body: bytes) -> bool:
    try:
        value = json.loads(body)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"error"} and isinstance(value["error"], str)


__all__ = ["LANGUAGES_PATH", "TRANSLATE_PATH", "TranslatorErrors", "install", "router"]
