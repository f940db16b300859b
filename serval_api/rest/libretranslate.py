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
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from serval_api.auth import READ_ENGINES, Caller
from serval_api.errors import InvalidArgument, PermissionDenied, ServalError
from serval_api.rest.deps import ServicesDep
from serval_api.rest.libretranslate_codes import language_name, libre_code, nllb_code
from serval_api.service import text_translation
from serval_api.service.context import Services
from serval_api.service.detection import Detection, detect, detect_async
from serval_api.service.html_text import plain_text, translate_html
from serval_api.service.text_translation import TextModel, TextTranslation

router = APIRouter(tags=["LibreTranslate"])

PATHS = frozenset({"/translate", "/detect", "/languages", "/frontend/settings", "/translate_file", "/health"})
"""Where errors answer `{"error"}` (the app's middlewares and handlers ask)."""
KEY_REQUIRED = "Please contact the server operator to get an API key"
INVALID_KEY = "Invalid API key"
FILES_DISABLED = "Files translation are disabled on this server."
MISSING = "Invalid request: missing {} parameter"
NOT_TEXTS = "Invalid request: q must be a string or a list of strings"
FORMATS = ("text", "html")
AUTO = "auto"
FRONTEND_TIMEOUT_MS = 500
"""LibreTranslate's default: how long its web page waits after a keystroke before translating."""
SHOWN_CHARS = 20
"""How much of a client's value an error message quotes."""
_STATUS = {401: 403, 404: 403, 405: 400, 409: 400}
"""The core's statuses LibreTranslate's clients do not know: a key whose engine is gone is a key
problem (403, which deep-translator reports as one); a state the request cannot change is 400."""
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, X-API-Key",
    "Access-Control-Allow-Methods": "GET, POST",
    "Access-Control-Max-Age": str(20 * 24 * 3600),
}
KEY_FIELD = "key as `api_key` (or X-API-Key)"
"""How the generated reference (docs/reference/rest.md) says these routes are authenticated."""
ANONYMOUS = Caller(owner="", scopes=frozenset({READ_ENGINES}))
"""Who reads `/languages` without a key: it may see the public base model's languages, as anyone
may see LibreTranslate's."""


@dataclass(frozen=True)
class _Request:
    fields: dict[str, Any]
    json: bool
    """Fields came from a JSON body (form and query values get LibreTranslate's `\\r\\n` → `\\n`)."""


# ---- the OpenAPI description (the handlers read the request themselves) ----------------------

_TEXTS_SCHEMA = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
}
_DETECTION = {
    "type": "object",
    "properties": {"confidence": {"type": "number"}, "language": {"type": "string"}},
    "required": ["confidence", "language"],
}


def _body(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    form = {name: ({"type": "string"} if name == "q" else schema) for name, schema in properties.items()}
    return {
        "required": False,
        "content": {
            "application/json": {
                "schema": {"type": "object", "properties": properties, "required": list(required)}
            },
            "application/x-www-form-urlencoded": {
                "schema": {"type": "object", "properties": form, "required": list(required)}
            },
        },
    }


def _query(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}} for n in names]


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        400: "A parameter is missing or invalid, a language is not supported, no API key was sent",
        403: "Invalid API key, or the key may not translate",
        413: "The request body is larger than the service takes",
        429: "The key made too many requests this minute; retry after Retry-After (docs/limits.md)",
        503: "The model is loading or no translation server is running; retry (see Retry-After)",
    }
    return {code: _json(_ERROR, what[code]) for code in codes}


_TRANSLATE_FIELDS = {
    "q": _TEXTS_SCHEMA,
    "source": {"type": "string", "description": "A language code, or `auto`"},
    "target": {"type": "string"},
    "format": {"type": "string", "enum": list(FORMATS)},
    "alternatives": {"type": "integer", "minimum": 0},
    "api_key": {"type": "string"},
}
_TRANSLATED = {
    "type": "object",
    "properties": {
        "translatedText": _TEXTS_SCHEMA,
        "alternatives": {
            "oneOf": [
                {"type": "array", "items": {"type": "string"}},
                {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            ]
        },
        "detectedLanguage": {"oneOf": [_DETECTION, {"type": "array", "items": _DETECTION}]},
    },
    "required": ["translatedText"],
}
_LANGUAGES = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "name": {"type": "string"},
            "targets": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["code", "name", "targets"],
    },
}
_NAMED = {"type": "object", "properties": {"code": {"type": "string"}, "name": {"type": "string"}}}
_SETTINGS = {
    "type": "object",
    "properties": {
        "charLimit": {"type": "integer"},
        "frontendTimeout": {"type": "integer"},
        "apiKeys": {"type": "boolean"},
        "keyRequired": {"type": "boolean"},
        "suggestions": {"type": "boolean"},
        "filesTranslation": {"type": "boolean"},
        "supportedFilesFormat": {"type": "array", "items": {"type": "string"}},
        "language": {"type": "object", "properties": {"source": _NAMED, "target": _NAMED}},
    },
}


# ---- routes ------------------------------------------------------------------------------------


@router.post(
    "/translate",
    response_model=None,
    openapi_extra={
        "requestBody": _body(_TRANSLATE_FIELDS, ("q", "source", "target")),
        "parameters": _query(list(_TRANSLATE_FIELDS)),
        "x-auth": KEY_FIELD,
    },
    responses={200: _json(_TRANSLATED, "The translation(s)"), **_errors(400, 403, 413, 429, 503)},
)
async def translate(request: Request, services: ServicesDep) -> Response:
    """Translate `q` (a text, or a list of texts answered as a list in the same order) from
    `source` (a code, or `auto`: `detectedLanguage` says what was detected) to `target`;
    `format: html` keeps the markup; `alternatives: N` adds N more whole translations."""
    return await _answer(_translate(services, request))


@router.post(
    "/detect",
    response_model=None,
    openapi_extra={
        "requestBody": _body({"q": _TEXTS_SCHEMA, "api_key": {"type": "string"}}, ("q",)),
        "parameters": _query(["q", "api_key"]),
        "x-auth": KEY_FIELD,
    },
    responses={
        200: _json({"type": "array", "items": _DETECTION}, "Languages the text may be in, best first"),
        **_errors(400, 403, 413, 503),
    },
)
async def detect_language(request: Request, services: ServicesDep) -> Response:
    """The languages (among those the key translates from) `q` may be in, best first, with a
    confidence from 0 to 100."""
    return await _answer(_detect(services, request))


async def _languages_route(request: Request, services: ServicesDep) -> Response:
    """The languages the key translates from, each with the languages it translates it to
    (without a key: the public base model's, or none)."""
    return await _answer(_languages(services, request))


for _method in ("GET", "POST"):
    router.add_api_route(
        "/languages",
        _languages_route,
        methods=[_method],
        response_model=None,
        name=f"languages_{_method.lower()}",
        openapi_extra={
            "parameters": _query(["api_key"]),
            "x-auth": "optional: " + KEY_FIELD,
            **({"requestBody": _body({"api_key": {"type": "string"}}, ())} if _method == "POST" else {}),
        },
        responses={200: _json(_LANGUAGES, "The languages"), **_errors(400, 403, 413, 503)},
    )


@router.get("/frontend/settings", response_model=None, responses={200: _json(_SETTINGS, "Settings")})
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
    responses={403: _json(_ERROR, FILES_DISABLED)},
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
        200: _json({"type": "object", "properties": {"status": {"type": "string"}}}, "The service is up")
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


# ---- handlers ----------------------------------------------------------------------------------


async def _answer(work: Awaitable[Any]) -> Response:
    try:
        result = await work
    except ServalError as error:
        return error_response(error)
    response = result if isinstance(result, Response) else JSONResponse(result)
    response.headers.update(CORS_HEADERS)
    return response


def error_response(error: ServalError) -> JSONResponse:
    """`error` in LibreTranslate's shape and with a status its clients know."""
    headers = dict(CORS_HEADERS)
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after_s)))
    status = _STATUS.get(error.http_status, error.http_status)
    return JSONResponse({"error": error.message}, status_code=status, headers=headers)


async def _translate(services: Services, request: Request) -> dict[str, Any]:
    asked = await _read(request)
    caller = await _caller(services, request, asked.fields)
    texts, batch = _texts(asked)
    source, target = _string(asked.fields, "source"), _string(asked.fields, "target")
    if not source:
        raise InvalidArgument(MISSING.format("source"))
    if not target:
        raise InvalidArgument(MISSING.format("target"))
    text_format = _string(asked.fields, "format") or "text"
    if text_format not in FORMATS:
        raise InvalidArgument(f"{_shown(text_format)} format is not supported")
    alternatives = _alternatives(asked.fields, services.settings.api.max_n_best - 1)
    _check_size(services, texts)

    model = await text_translation.text_model(services, caller)
    pairs = _Pairs.of(model)
    target_code = nllb_code(target, model.languages)
    if target_code is None:
        raise InvalidArgument(f"{_shown(target)} is not supported")
    detected: list[Detection] | None = None
    if source.strip().lower() == AUTO:
        detected = await asyncio.to_thread(_detect_each, texts, pairs.sources, text_format)
        sources = [d.language for d in detected]
    else:
        source_code = nllb_code(source, pairs.sources)
        if source_code is None:
            raise InvalidArgument(f"{_shown(source)} is not supported")
        sources = [source_code] * len(texts)
    for source_code in dict.fromkeys(sources):
        same = detected is not None and source_code == target_code
        if not same and target_code not in pairs.targets(source_code):
            raise InvalidArgument(
                f"{language_name(target_code)} ({libre_code(target_code)}) is not available as a target "
                f"language from {language_name(source_code)} ({libre_code(source_code)})"
            )

    async def one(text: str, source_code: str) -> TextTranslation:
        if not text.strip() or source_code == target_code:
            return TextTranslation(text)  # nothing to translate, or already in the target language
        if text_format == "html":
            return TextTranslation(await translate_html(text, piece(source_code)))
        return await text_translation.translate_text(
            services, caller, source_code, target_code, text, alternatives=alternatives
        )

    def piece(source_code: str) -> Callable[[str], Awaitable[str]]:
        async def translated(text: str) -> str:
            answer = await text_translation.translate_text(services, caller, source_code, target_code, text)
            return answer.translation

        return translated

    results = await asyncio.gather(*(one(t, s) for t, s in zip(texts, sources, strict=True)))
    answer: dict[str, Any] = {
        "translatedText": [r.translation for r in results] if batch else results[0].translation
    }
    if alternatives:
        every = [list(r.alternatives) for r in results]
        answer["alternatives"] = every if batch else every[0]
    if detected is not None:
        shown = [_detection(d) for d in detected]
        answer["detectedLanguage"] = shown if batch else shown[0]
    return answer


async def _detect(services: Services, request: Request) -> list[dict[str, Any]]:
    asked = await _read(request)
    caller = await _caller(services, request, asked.fields)
    texts, _ = _texts(asked)
    model = await text_translation.text_model(services, caller)
    sources = _Pairs.of(model).sources
    # Detection needs no more than a translation may send; the rest would only cost time.
    text = "\n".join(texts)[: services.settings.api.max_text_chars]
    found = await detect_async(text, sources)
    return [_detection(d) for d in found or [Detection(sources[0], 0.0)]]


async def _languages(services: Services, request: Request) -> Response:
    asked = await _read(request)
    caller = await _optional_caller(services, request, asked.fields)
    if caller is None:
        if text_translation.public_base_model(services) is None:
            return Response(b"[]", media_type="application/json")
        try:
            model = await text_translation.text_model(services, ANONYMOUS)
        except InvalidArgument:  # no public base model is published
            return Response(b"[]", media_type="application/json")
    else:
        model = await text_translation.text_model(services, caller)
    return Response(
        _language_list(model.languages, model.engine_id is not None), media_type="application/json"
    )


@lru_cache(maxsize=32)
def _language_list(languages: tuple[str, ...], bound: bool) -> bytes:
    """The rendered list (a base model's 200 languages each list 199 targets: rendered once)."""
    pairs = _Pairs(languages, bound)
    return json.dumps(
        [
            {
                "code": libre_code(code),
                "name": language_name(code),
                "targets": [libre_code(t) for t in pairs.targets(code)],
            }
            for code in languages
        ],
        ensure_ascii=False,
    ).encode()


@dataclass(frozen=True)
class _Pairs:
    """What a model translates: an engine its one pair, a base model any two of its languages."""

    languages: tuple[str, ...]
    bound: bool

    @classmethod
    def of(cls, model: TextModel) -> _Pairs:
        return cls(model.languages, model.engine_id is not None)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.languages[:1] if self.bound else self.languages

    def targets(self, source: str) -> tuple[str, ...]:
        if self.bound:
            return self.languages[1:] if source == self.languages[0] else ()
        return tuple(code for code in self.languages if code != source)


# ---- reading the request -----------------------------------------------------------------------


async def _read(request: Request) -> _Request:
    fields: dict[str, Any] = {key: request.query_params.getlist(key)[0] for key in request.query_params}
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        body = await request.body()
        if body.strip():
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError):
                raise InvalidArgument("Invalid JSON format") from None
            if not isinstance(parsed, dict):
                raise InvalidArgument("Invalid JSON format")
            fields.update(parsed)
        return _Request(fields, json=True)
    if media in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            async with request.form() as form:
                for key in form:
                    value = form.getlist(key)[0]
                    if isinstance(value, str):
                        fields[key] = value
        except (HTTPException, ValueError) as error:
            raise InvalidArgument("Invalid request: the form body cannot be read") from error
    return _Request(fields, json=False)


async def _caller(services: Services, request: Request, fields: dict[str, Any]) -> Caller:
    caller = await _optional_caller(services, request, fields)
    if caller is None:
        raise InvalidArgument(KEY_REQUIRED)
    return caller


async def _optional_caller(services: Services, request: Request, fields: dict[str, Any]) -> Caller | None:
    """The key's caller; None: no key was sent."""
    key = fields.get("api_key")
    if key is not None and not isinstance(key, str):
        raise PermissionDenied(INVALID_KEY)
    key = key or request.headers.get("x-api-key")
    if not key:
        return None
    caller = await services.lookups.caller(key)
    if caller is None:
        raise PermissionDenied(INVALID_KEY)
    return caller


def _texts(asked: _Request) -> tuple[list[str], bool]:
    """`q` as a list, and whether it came as one."""
    q = asked.fields.get("q")
    if q is None or q == "" or q == []:
        raise InvalidArgument(MISSING.format("q"))
    if isinstance(q, str):
        return [q if asked.json else _unix_lines(q)], False
    if isinstance(q, list) and all(isinstance(text, str) for text in q):
        return list(q), True
    raise InvalidArgument(NOT_TEXTS)


def _unix_lines(text: str) -> str:
    """A form's line breaks are CRLF (RFC 2046): counted and translated as LibreTranslate does."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _string(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value
    raise InvalidArgument(f"Invalid request: {name} parameter must be a string")


def _alternatives(fields: dict[str, Any], maximum: int) -> int:
    value = fields.get("alternatives")
    if value is None or value == "":
        return 0
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            number = None
    if number is None:
        raise InvalidArgument("Invalid request: alternatives parameter must be a number")
    if not 0 <= number <= maximum:
        raise InvalidArgument(f"Invalid request: alternatives parameter must be between 0 and {maximum}")
    return number


def _check_size(services: Services, texts: list[str]) -> None:
    limit = services.settings.api.max_text_chars
    chars = sum(len(text) for text in texts)
    if chars > limit:
        raise InvalidArgument(f"Invalid request: request ({chars}) exceeds text limit ({limit})")
    most = services.settings.api.max_list_items
    if len(texts) > most:
        raise InvalidArgument(f"Invalid request: request ({len(texts)}) exceeds batch limit ({most})")


def _detect_each(texts: list[str], candidates: tuple[str, ...], text_format: str) -> list[Detection]:
    """Each text's most likely language; a blank text gets the whole batch's (it is answered as
    it is anyway). Markup is detected by its text, not its tag names."""
    plain = [plain_text(t) if text_format == "html" else t for t in texts]
    fallback = Detection(candidates[0], 0.0)
    whole: Detection | None = None
    found = []
    for text in plain:
        if text.strip():
            found.append(next(iter(detect(text, candidates, 1)), fallback))
            continue
        if whole is None:
            whole = next(iter(detect("\n".join(plain), candidates, 1)), fallback)
        found.append(whole)
    return found


def _detection(found: Detection) -> dict[str, Any]:
    return {"confidence": found.confidence, "language": libre_code(found.language)}


def _shown(value: str) -> str:
    return value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…"


__all__ = ["PATHS", "error_response", "router"]
