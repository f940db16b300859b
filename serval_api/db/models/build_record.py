"""What a build records of its run, as typed models: its execution data (`ExecutionData`, with its
`Diagnostic`s), the phases its job reported (`Phase`) and the analysis of each parallel corpus
(`CorpusAnalysis`). The build's columns hold them (`base.JsonModel`, `base.JsonModelList`); the
REST and gRPC edges turn them into their wire shapes.

Stored as the camelCase JSON the columns held before these models (Serval's names, through the
aliases), so old rows load unchanged and no data migration was needed. A stored key no field
names is kept (`extra="allow"`) and written back as it was; only a row loads so tolerantly
(`base.STORED_CONTEXT`): building a record, or `updated`, with a misspelt field is a
`ValidationError` / `ValueError` where that happens, not a silent None later.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel

from serval_api.db.models.base import STORED_CONTEXT

VerseCount = dict[str, dict[str, int]]
"""Book → chapter (as text, as Serval's keys) → verses."""


class Record(BaseModel):
    """camelCase JSON in the row, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context != STORED_CONTEXT:
            fields = cls.model_fields
            known = {*fields, *(f.alias for f in fields.values() if f.alias)}
            unknown = sorted(str(key) for key in data if key not in known)
            if unknown:
                raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}")
        return data

    def updated(self, **changes: Any) -> Self:
        """A copy with `changes` (by field name; one no field has is an error, as when built)."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no field {', '.join(unknown)}")
        return self.model_copy(update=changes)


class Severity(StrEnum):
    INFO = "Info"
    WARN = "Warn"
    ERROR = "Error"


class Diagnostic(Record):
    """Serval 1.20's build diagnostic (`service/diagnostics.py` makes them)."""

    code: str
    category: str
    message: str
    severity: str
    """A `Severity`'s value (kept as text: an old row's unknown severity still loads)."""
    data: dict[str, Any] = Field(default_factory=dict)


def _no_warnings_as_empty(value: Any) -> Any:
    return [] if value is None else value


class ExecutionData(Record):
    """Serval's `ExecutionData` and `WordAlignmentExecutionData` in one: a translation build
    leaves the word-align fields None, a word-alignment build the pretranslate ones. The fields'
    order is the order a build's record gains them (and REST shows them)."""

    train_count: int | None = None
    is_train_filtered_by_chapter: bool | None = None
    train_verse_count: VerseCount | None = None
    warnings: Annotated[list[str], BeforeValidator(_no_warnings_as_empty)] = Field(default_factory=list)
    engine_source_language_tag: str | None = None
    engine_target_language_tag: str | None = None
    train_segment_count: int | None = None
    pretranslate_count: int | None = None
    is_pretranslate_filtered_by_chapter: bool | None = None
    pretranslate_verse_count: VerseCount | None = None
    word_align_count: int | None = None
    is_word_align_filtered_by_chapter: bool | None = None
    word_align_verse_count: VerseCount | None = None
    diagnostics: list[Diagnostic] | None = None
    diagnostics_truncated: bool | None = None
    resolved_source_language: str | None = None
    resolved_target_language: str | None = None
    average_pretranslation_confidence: float | None = None


Instant = Annotated[datetime, PlainSerializer(lambda d: d.isoformat(), return_type=str)]
"""Stored as `datetime.isoformat()` writes it (`+00:00`), as before the models."""


class Phase(Record):
    """A stage of the build job (Serval's `Phase`): `stage` is `Train` or `Inference`."""

    stage: str
    step: int | None = None
    step_count: int | None = None
    started: Instant | None = None


class CorpusAnalysis(Record):
    """Serval's `ParallelCorpusAnalysis` of one parallel corpus, as the build job reported it."""

    parallel_corpus_ref: str
    target_quote_convention: str
    can_denormalize_quotes: bool
    source_quote_convention: str | None = None
