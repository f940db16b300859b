"""Reading a LibreTranslate request: its fields from a JSON body, a form body (urlencoded or
multipart) or the query string, as LibreTranslate's clients send them (body fields win over query
fields of the same name); the caller from its `api_key` field (or the `X-API-Key` header); and each
field checked and read as LibreTranslate reads it, with its messages.

It stands apart from the handlers (`libretranslate_handlers.py`), which only say what to do with
the fields once they are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException

from serval_api.auth import Caller
from serval_api.errors import InvalidArgument, PermissionDenied
from serval_api.rest.libretranslate_protocol import INVALID_KEY, KEY_REQUIRED, MISSING, NOT_TEXTS
from serval_api.service.context import Services


@dataclass(frozen=True)
class LibreRequest:
    fields: dict[str, Any]
    json: bool
    """Fields came from a JSON body (form and query values get LibreTranslate's `\\r\\n` → `\\n`)."""


async def read_request(request: Request) -> LibreRequest:
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
        return LibreRequest(fields, json=True)
    if media in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            async with request.form() as form:
                for key in form:
                    value = form.getlist(key)[0]
                    if isinstance(value, str):
                        fields[key] = value
        except (HTTPException, ValueError) as error:
            raise InvalidArgument("Invalid request: the form body cannot be read") from error
    return LibreRequest(fields, json=False)


async def required_caller(services: Services, request: Request, fields: dict[str, Any]) -> Caller:
    found = await optional_caller(services, request, fields)
    if found is None:
        raise InvalidArgument(KEY_REQUIRED)
    return found


async def optional_caller(services: Services, request: Request, fields: dict[str, Any]) -> Caller | None:
    """The key's caller; None: no key was sent."""
    key = fields.get("api_key")
    if key is not None and not isinstance(key, str):
        raise PermissionDenied(INVALID_KEY)
    key = key or request.headers.get("x-api-key")
    if not key:
        return None
    found = await services.lookups.caller(key)
    if found is None:
        raise PermissionDenied(INVALID_KEY)
    return found


def read_texts(asked: LibreRequest) -> tuple[list[str], bool]:
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


def read_string(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value
    raise InvalidArgument(f"Invalid request: {name} parameter must be a string")


def read_alternatives(fields: dict[str, Any], maximum: int) -> int:
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


def check_size(services: Services, texts: list[str]) -> None:
    limit = services.settings.api.max_text_chars
    chars = sum(len(text) for text in texts)
    if chars > limit:
        raise InvalidArgument(f"Invalid request: request ({chars}) exceeds text limit ({limit})")
    most = services.settings.api.max_list_items
    if len(texts) > most:
        raise InvalidArgument(f"Invalid request: request ({len(texts)}) exceeds batch limit ({most})")
