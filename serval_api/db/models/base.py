"""What every table shares: the declarative base, UTC datetimes on every backend, typed JSON
(pydantic models stored as JSON), and the enums stored as text (engine types, build states)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter
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


TRANSLATION_TYPES = frozenset(t for t in EngineType if t.family.kind is Kind.TRANSLATION)
"""The engine types served under `/translation/engines` (and the translation builds feed)."""

WORD_ALIGNMENT_TYPES = frozenset(t for t in EngineType if t.family.kind is Kind.WORD_ALIGNMENT)
"""The engine types served under `/word-alignment/engines`."""


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


M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

STORED_CONTEXT = {"stored": True}
"""The validation context a row's JSON loads under (`build_record.Record` keeps its unknown keys)."""


class _JsonShape(TypeDecorator[T], Generic[T]):
    """A value of a pydantic shape stored as JSON: by alias, without its None fields. `impl` is
    plain JSON, so the schema (and what alembic compares) is that of a JSON column. A raw mapping
    assigned to the column is validated as a stored row would be."""

    impl = JSON

    def __init__(self, adapter: TypeAdapter[T]) -> None:
        super().__init__()
        self._adapter = adapter

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        typed = self._adapter.validate_python(value, context=STORED_CONTEXT)
        return self._adapter.dump_python(typed, mode="json", by_alias=True, exclude_none=True)

    def process_result_value(self, value: Any, dialect: Dialect) -> T | None:
        return None if value is None else self._adapter.validate_python(value, context=STORED_CONTEXT)


class JsonModel(_JsonShape[M]):
    """One `model` (`JsonModel(ExecutionData)`)."""

    cache_ok = True

    def __init__(self, model: type[M]) -> None:
        super().__init__(TypeAdapter(model))
        self.model = model  # named as the argument: SQLAlchemy's cache key for `cache_ok` reads it


class JsonModelList(_JsonShape[list[M]]):
    """A list of `model`s (`JsonModelList(Phase)`)."""

    cache_ok = True

    def __init__(self, model: type[M]) -> None:
        super().__init__(TypeAdapter(list[model]))  # type: ignore[valid-type]
        self.model = model  # the cache key, as in JsonModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime, dict[str, Any]: JSON, list[Any]: JSON}
