"""What every table shares: the declarative base, UTC datetimes on every backend, and the enums
stored as text (engine types, build states)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    TypeDecorator,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

from serval_common.families import EngineFamily, Kind, family


class EngineType(StrEnum):
    """Serval's engine types. `nmt`, `echo` and `smt-transfer` are translation engines
    (`/translation/engines`); `statistical` and `echo-word-alignment` are word-alignment engines
    (`/word-alignment/engines`)."""

    NMT = "nmt"
    ECHO = "echo"
    SMT_TRANSFER = "smt-transfer"
    STATISTICAL = "statistical"
    ECHO_WORD_ALIGNMENT = "echo-word-alignment"

    @property
    def family(self) -> EngineFamily:
        """What this type answers, how it is built and what serves it (`serval_common.families`)."""
        return family(self.value)

    @property
    def is_word_alignment(self) -> bool:
        return self.family.kind is Kind.WORD_ALIGNMENT

    @property
    def is_echo(self) -> bool:
        """Echo types need no model and no node: their builds run inside the API service."""
        return self.family.served_here


class BuildState(StrEnum):
    PENDING = "Pending"
    ACTIVE = "Active"
    COMPLETED = "Completed"
    FAULTED = "Faulted"
    CANCELED = "Canceled"

    @property
    def is_running(self) -> bool:
        return self in (BuildState.PENDING, BuildState.ACTIVE)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the offset on its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime, dict[str, Any]: JSON, list[Any]: JSON}
