"""The REST wire shapes of Serval's word-alignment engines (`/word-alignment/engines`): camelCase,
nulls omitted, as `protocol.py` is for translation engines."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import Field

from serval_api.db.models import BuildRow, EngineRow, ParallelCorpusRow, WordAlignmentRow
from serval_api.rest.build_corpora import (
    ParallelCorpusFilter,
    ParallelCorpusFilterConfig,
    TrainingCorpus,
    TrainingCorpusConfig,
    corpus_filters,
    filter_links,
    training_corpora,
)
from serval_api.rest.protocol import AlignedWordPair, Phase, phases_dto, recorded_execution_data
from serval_api.rest.wire import Model, NmtBuildOptions, ResourceLink
from serval_api.service import build_corpora
from serval_api.service.build_corpora import WordAlignEntry
from serval_api.urls import build_url, corpus_url, engine_url, parallel_corpus_url
from serval_common import core


class WordAlignmentEngineConfig(Model):
    source_language: str
    target_language: str
    type: str
    name: str | None = None
    is_model_persisted: bool | None = Field(
        default=None,
        description="Whether the model is kept once built (Serval 1.20); recorded, and read back.",
    )


class WordAlignmentEngine(Model):
    id: str
    url: str
    name: str | None = None
    source_language: str
    target_language: str
    type: str
    is_model_persisted: bool | None = None
    is_building: bool
    model_revision: int
    confidence: float
    corpus_size: int
    date_created: datetime | None = None


class WordAlignmentParallelCorpusConfig(Model):
    name: str | None = None
    source_corpus_ids: list[str]
    target_corpus_ids: list[str]


class WordAlignmentParallelCorpusUpdateConfig(Model):
    source_corpus_ids: list[str] | None = None
    target_corpus_ids: list[str] | None = None


class WordAlignmentParallelCorpus(Model):
    id: str
    url: str
    name: str | None = None
    engine: ResourceLink
    source_corpora: list[ResourceLink]
    target_corpora: list[ResourceLink]


class WordAlignmentCorpusConfig(Model):
    """A parallel corpus of the engine to align; each side's filters, when given, name the corpora
    of that side to use and their texts."""

    parallel_corpus_id: str | None = None
    source_filters: list[ParallelCorpusFilterConfig] | None = None
    target_filters: list[ParallelCorpusFilterConfig] | None = None


class WordAlignmentCorpus(Model):
    parallel_corpus: ResourceLink | None = None
    source_filters: list[ParallelCorpusFilter] | None = None
    target_filters: list[ParallelCorpusFilter] | None = None


class WordAlignmentBuildConfig(Model):
    name: str | None = None
    train_on: list[TrainingCorpusConfig] | None = None
    word_align_on: list[WordAlignmentCorpusConfig] | None = Field(
        default=None,
        description="The parallel corpora whose sentence pairs the build aligns; omitted: all of the "
        "engine's parallel corpora; empty: none.",
    )
    options: NmtBuildOptions = None


class WordAlignmentBuild(Model):
    id: str
    url: str
    revision: int
    name: str | None = None
    engine: ResourceLink
    train_on: list[TrainingCorpus] | None = None
    word_align_on: list[WordAlignmentCorpus] | None = None
    step: int
    percent_completed: float | None = None
    progress: float | None = None
    message: str | None = None
    queue_depth: int | None = None
    state: str
    date_created: datetime | None = None
    date_started: datetime | None = None
    date_completed: datetime | None = None
    date_finished: datetime | None = None
    options: dict[str, Any] | None = None
    deployment_version: str | None = None
    execution_data: dict[str, Any] = Field(
        description="Always carries `trainCount`, `wordAlignCount` and `warnings`; the engine's "
        "language tags, the verse counts (book → chapter → verses), whether filters chose chapters, "
        "and the build's `diagnostics` when known."
    )
    phases: list[Phase] | None = None


class WordAlignmentRequest(Model):
    source_segment: str
    target_segment: str


class WordAlignmentResult(Model):
    source_tokens: list[str]
    target_tokens: list[str]
    alignment: list[AlignedWordPair]


class WordAlignment(Model):
    """Serval's WordAlignmentDto; `refs` is the deprecated alias of `targetRefs`."""

    text_id: str
    source_refs: list[str]
    target_refs: list[str]
    refs: list[str] = Field(json_schema_extra={"deprecated": True})
    source_tokens: list[str]
    target_tokens: list[str]
    alignment: list[AlignedWordPair]


def engine_dto(base_url: str, engine: EngineRow) -> WordAlignmentEngine:
    return WordAlignmentEngine(
        id=engine.id,
        url=engine_url(base_url, engine.id, word_alignment=True),
        name=engine.name,
        source_language=engine.source_language,
        target_language=engine.target_language,
        type=engine.type,
        is_model_persisted=engine.is_model_persisted,
        is_building=engine.is_building,
        model_revision=engine.model_revision,
        confidence=engine.confidence,
        corpus_size=engine.corpus_size,
        date_created=engine.date_created,
    )


def parallel_corpus_dto(base_url: str, pc: ParallelCorpusRow) -> WordAlignmentParallelCorpus:
    return WordAlignmentParallelCorpus(
        id=pc.id,
        url=parallel_corpus_url(base_url, pc.engine_id, pc.id, word_alignment=True),
        name=pc.name,
        engine=ResourceLink(id=pc.engine_id, url=engine_url(base_url, pc.engine_id, word_alignment=True)),
        source_corpora=[ResourceLink(id=c, url=corpus_url(base_url, c)) for c in pc.source_corpus_ids],
        target_corpora=[ResourceLink(id=c, url=corpus_url(base_url, c)) for c in pc.target_corpus_ids],
    )


def word_align_entries(configs: Sequence[WordAlignmentCorpusConfig] | None) -> list[WordAlignEntry] | None:
    if configs is None:
        return None
    return [
        WordAlignEntry(
            parallel_corpus_id=c.parallel_corpus_id,
            source_filters=corpus_filters(c.source_filters),
            target_filters=corpus_filters(c.target_filters),
        )
        for c in configs
    ]


_EXECUTION_KEYS = (
    "trainCount",
    "wordAlignCount",
    "isTrainFilteredByChapter",
    "isWordAlignFilteredByChapter",
    "trainVerseCount",
    "wordAlignVerseCount",
    "warnings",
    "diagnostics",
    "diagnosticsTruncated",
    "engineSourceLanguageTag",
    "engineTargetLanguageTag",
)


def build_dto(base_url: str, build: BuildRow) -> WordAlignmentBuild:
    engine = engine_url(base_url, build.engine_id, word_alignment=True)
    recorded = recorded_execution_data(build.execution_data)
    execution_data = {
        "trainCount": 0,
        "wordAlignCount": 0,
        "warnings": [],
        **{k: recorded[k] for k in _EXECUTION_KEYS if k in recorded},
    }
    word_align_on = build_corpora.load_word_align(build.pretranslate)
    return WordAlignmentBuild(
        id=build.id,
        url=build_url(base_url, build.engine_id, build.id, word_alignment=True),
        revision=build.revision,
        name=build.name,
        engine=ResourceLink(id=build.engine_id, url=engine),
        train_on=_training(base_url, build),
        word_align_on=None
        if word_align_on is None
        else [
            WordAlignmentCorpus(
                parallel_corpus=None
                if e.parallel_corpus_id is None
                else ResourceLink(
                    id=e.parallel_corpus_id,
                    url=parallel_corpus_url(
                        base_url, build.engine_id, e.parallel_corpus_id, word_alignment=True
                    ),
                ),
                source_filters=filter_links(base_url, e.source_filters),
                target_filters=filter_links(base_url, e.target_filters),
            )
            for e in word_align_on
        ],
        step=build.step,
        percent_completed=build.progress,
        progress=build.progress,
        message=build.message,
        queue_depth=build.queue_depth,
        state=build.state,
        date_created=build.date_created,
        date_started=build.date_started,
        date_completed=build.date_finished,
        date_finished=build.date_finished,
        options=build.options,
        deployment_version=build.deployment_version,
        execution_data=execution_data,
        phases=phases_dto(build.phases),
    )


def _training(base_url: str, build: BuildRow) -> list[TrainingCorpus] | None:
    """Serval's links, with each parallel corpus's under `/word-alignment/engines`."""
    corpora = training_corpora(base_url, build.engine_id, build.train_on)
    for corpus in corpora or ():
        if corpus.parallel_corpus is not None:
            corpus.parallel_corpus.url = parallel_corpus_url(
                base_url, build.engine_id, corpus.parallel_corpus.id, word_alignment=True
            )
    return corpora


def word_alignment_dto(row: WordAlignmentRow) -> WordAlignment:
    target_refs = [str(ref) for ref in row.target_refs]
    return WordAlignment(
        text_id=row.text_id,
        source_refs=[str(ref) for ref in row.source_refs],
        target_refs=target_refs,
        refs=target_refs,
        source_tokens=[str(t) for t in row.source_tokens],
        target_tokens=[str(t) for t in row.target_tokens],
        alignment=[
            AlignedWordPair(source_index=s, target_index=t, score=score) for s, t, score in row.alignment
        ],
    )


def result_dto(result: core.WordAlignmentResult) -> WordAlignmentResult:
    return WordAlignmentResult(
        source_tokens=list(result.source_tokens),
        target_tokens=list(result.target_tokens),
        alignment=[
            AlignedWordPair(source_index=a.source_index, target_index=a.target_index, score=a.score)
            for a in result.alignment
        ],
    )
