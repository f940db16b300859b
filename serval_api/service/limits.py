"""Limits on what a request may carry, checked alike for REST and gRPC.

Text that is stored never exceeds its column's width and holds no NUL (PostgreSQL refuses NUL
in text), so a value that passes is stored the same on every database. An id a client chooses
is also part of store keys (`models/{engineId}/…`, `builds/{buildId}/…`) and URLs, so it is made
of letters, digits, `.`, `_` and `-` and cannot be `.` or `..`. A value that cannot be an id is
never looked up: it names nothing. Names a client gives files, corpora and texts end up in URLs
(`…/pretranslations/{textId}`), download file names and exports, so they are one path segment
(`segment_name`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sized

from sqlalchemy import String

from serval_api.db.models import Base, BuildRow, DataFileRow, EngineRow, PretranslationRow
from serval_api.errors import InvalidArgument, PayloadTooLarge
from serval_common.store.base import segment_problem


def column_width(model: type[Base], column: str) -> int:
    kind = model.__table__.c[column].type
    assert isinstance(kind, String) and kind.length is not None
    return kind.length


ID_CHARS = column_width(EngineRow, "id")
NAME_CHARS = column_width(EngineRow, "name")
LANGUAGE_TAG_CHARS = column_width(EngineRow, "source_language")
FILE_NAME_CHARS = column_width(DataFileRow, "name")
TEXT_ID_CHARS = column_width(PretranslationRow, "text_id")
CORPUS_ID_CHARS = column_width(PretranslationRow, "corpus_id")
BUILD_MESSAGE_CHARS = column_width(BuildRow, "message")
LOCATION_CHARS = 1000

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHOWN_CHARS = 60


def shown(value: str) -> str:
    """`value` quoted for an error message, cut when long."""
    return repr(value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…")


def no_nul(field: str, value: str) -> str:
    if "\x00" in value:
        raise InvalidArgument(f"{field}: NUL characters are not allowed")
    return value


def text(field: str, value: str, max_chars: int) -> str:
    no_nul(field, value)
    if len(value) > max_chars:
        raise InvalidArgument(f"{field}: {len(value)} characters; the limit is {max_chars}")
    return value


def optional_text(field: str, value: str | None, max_chars: int) -> str | None:
    return None if value is None else text(field, value, max_chars)


def segment_name(field: str, value: str, max_chars: int) -> str:
    """A name that may become one segment of a path, key or URL (a file name, a text id, a
    corpus name): at most `max_chars` characters, not `.` or `..`, no slash, backslash or control
    character, read as written, percent-decoded or NFKC-normalized (look-alike dots and slashes)."""
    text(field, value, max_chars)
    problem = segment_problem(value)
    if problem is not None:
        raise InvalidArgument(f"{field}: {shown(value)} is not a valid name ({problem})")
    return value


def optional_segment_name(field: str, value: str | None, max_chars: int) -> str | None:
    """None and the empty string (no name) pass."""
    return value if not value else segment_name(field, value, max_chars)


def segment(field: str, value: str, max_chars: int, *, blank: bool = False) -> str:
    """A segment to translate or train on: not blank (unless `blank`), at most `max_chars`
    characters (413)."""
    if not blank and not value.strip():
        raise InvalidArgument(f"{field} is empty")
    if len(value) > max_chars:
        raise PayloadTooLarge(f"{field} has {len(value)} characters; the limit is {max_chars}")
    return no_nul(field, value)


def new_id(field: str, value: str) -> str:
    """An id the client chooses for a new entity."""
    if len(value) > ID_CHARS or not _ID.fullmatch(value):
        raise InvalidArgument(
            f"{field}: {shown(value)} is not a valid id (1 to {ID_CHARS} letters, digits, '.', '_' "
            "or '-', not starting with '.')"
        )
    return value


def can_be_id(value: str) -> bool:
    """Whether any entity can have this id; lookups of anything else find nothing."""
    return 0 < len(value) <= ID_CHARS and "\x00" not in value


def items(field: str, values: Sized, limit: int) -> None:
    if len(values) > limit:
        raise InvalidArgument(f"{field}: {len(values)} items; the limit is {limit}")


def finite(field: str, value: float) -> float:
    if not math.isfinite(value):
        raise InvalidArgument(f"{field}: expected a finite number, not {value}")
    return value


def reported_text(value: str, max_chars: int) -> str:
    """Free text a build job reports (a status or fault message): NULs dropped, cut to fit."""
    value = value.replace("\x00", "")
    return value if len(value) <= max_chars else value[: max_chars - 1] + "…"
