"""LibreTranslate's wire, apart from what its routes do: the paths that answer in its shape, the
messages its clients recognise, the CORS headers browsers need, its `{"error"}` answer with the
statuses its clients know, and the OpenAPI description of its fields and answers (the handlers
read the request themselves, so FastAPI cannot describe it from their signatures).

It stands apart from the router (`libretranslate.py`) because the app's middlewares and error
handlers need the paths and the error shape too (`app.py`), without the routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse

from serval_api.errors import ServalError

PATHS = frozenset({"/translate", "/detect", "/languages", "/frontend/settings", "/translate_file", "/health"})
"""Where errors answer `{"error"}` (the app's middlewares and handlers ask)."""
KEY_REQUIRED = "Please contact the server operator to get an API key"
INVALID_KEY = "Invalid API key"
FILES_DISABLED = "Files translation are disabled on this server."
MISSING = "Invalid request: missing {} parameter"
NOT_TEXTS = "Invalid request: q must be a string or a list of strings"
FORMATS = ("text", "html")
AUTO = "auto"
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


def error_response(error: ServalError) -> JSONResponse:
    """`error` in LibreTranslate's shape and with a status its clients know."""
    headers = dict(CORS_HEADERS)
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after_s)))
    status = _STATUS.get(error.http_status, error.http_status)
    return JSONResponse({"error": error.message}, status_code=status, headers=headers)


# ---- the OpenAPI description -------------------------------------------------------------------

TEXTS_SCHEMA = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
}
DETECTION_SCHEMA = {
    "type": "object",
    "properties": {"confidence": {"type": "number"}, "language": {"type": "string"}},
    "required": ["confidence", "language"],
}


def request_body(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """A body of these fields, as JSON or as a form (where `q` is one string)."""
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


def query_parameters(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}} for n in names]


def json_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error_answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        400: "A parameter is missing or invalid, a language is not supported, no API key was sent",
        403: "Invalid API key, or the key may not translate",
        413: "The request body is larger than the service takes",
        429: "The key made too many requests this minute; retry after Retry-After (docs/limits.md)",
        503: "The model is loading or no translation server is running; retry (see Retry-After)",
    }
    return {code: json_answer(ERROR_SCHEMA, what[code]) for code in codes}


TRANSLATE_FIELDS = {
    "q": TEXTS_SCHEMA,
    "source": {"type": "string", "description": "A language code, or `auto`"},
    "target": {"type": "string"},
    "format": {"type": "string", "enum": list(FORMATS)},
    "alternatives": {"type": "integer", "minimum": 0},
    "api_key": {"type": "string"},
}
TRANSLATED_SCHEMA = {
    "type": "object",
    "properties": {
        "translatedText": TEXTS_SCHEMA,
        "alternatives": {
            "oneOf": [
                {"type": "array", "items": {"type": "string"}},
                {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            ]
        },
        "detectedLanguage": {"oneOf": [DETECTION_SCHEMA, {"type": "array", "items": DETECTION_SCHEMA}]},
    },
    "required": ["translatedText"],
}
LANGUAGES_SCHEMA = {
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
SETTINGS_SCHEMA = {
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
