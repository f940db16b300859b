"""The REST wire shapes of the Serval contract: camelCase, enums as strings, nulls omitted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from serval_api.db.models import BuildRow, EngineRow, PretranslationRow, WebhookRow, build_record
from serval_api.rest.build_corpora import (
    PretranslateCorpus,
    PretranslateCorpusConfig,
    TrainingCorpus,
    TrainingCorpusConfig,
    pretranslate_corpora,
    training_corpora,
)
from serval_api.rest.wire import Model, NmtBuildOptions, ResourceLink
from serval_api.urls import build_url, engine_url, hook_url
from serval_api.webhooks.events import WebhookEvent
from serval_common import core


class TranslationEngineConfig(Model):
    source_language: str
    target_language: str
    type: str
    name: str | None = None
    is_model_persisted: bool | None = None


class TranslationEngineUpdateConfig(Model):
    source_language: str | None = None
    target_language: str | None = None


class TranslationEngine(Model):
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


class TranslationBuildConfig(Model):
    name: str | None = None
    train_on: list[TrainingCorpusConfig] | None = None
    pretranslate: list[PretranslateCorpusConfig] | None = None
    options: NmtBuildOptions = None
    model: str | None = Field(
        default=None,
        description="The base model the build starts from: the name of one an administrator "
        "published, as the option `baseModel` (Serval 1.20).",
    )


class Phase(Model):
    stage: str
    step: int | None = None
    step_count: int | None = None
    started: datetime | None = None


class ParallelCorpusAnalysis(Model):
    parallel_corpus_ref: str
    source_quote_convention: str | None = None
    target_quote_convention: str
    can_denormalize_quotes: bool


class TranslationBuild(Model):
    id: str
    url: str
    revision: int
    name: str | None = None
    engine: ResourceLink
    step: int
    percent_completed: float | None = None
    progress: float | None = None
    message: str | None = None
    queue_depth: int | None = None
    state: str
    train_on: list[TrainingCorpus] | None = None
    pretranslate: list[PretranslateCorpus] | None = None
    date_created: datetime | None = None
    date_started: datetime | None = None
    date_completed: datetime | None = None
    date_finished: datetime | None = None
    options: dict[str, Any] | None = None
    deployment_version: str | None = None
    execution_data: dict[str, Any] = Field(
        description="Always carries `trainCount`, `pretranslateCount` and `warnings`; the engine's "
        "language tags and what they resolved to, the verse counts (book → chapter → verses), whether "
        "filters chose chapters, the build's `diagnostics` and `averagePretranslationConfidence` when "
        "known (Serval 1.20)."
    )
    phases: list[Phase] | None = None
    analysis: list[ParallelCorpusAnalysis] | None = None
    target_quote_convention: str | None = None
    can_denormalize_quotes: bool


class AlignedWordPair(Model):
    source_index: int
    target_index: int
    score: float | None = None


class Phrase(Model):
    source_segment_start: int
    source_segment_end: int
    target_segment_cut: int


class TranslationResult(Model):
    translation: str
    source_tokens: list[str]
    target_tokens: list[str]
    confidences: list[float]
    sources: list[list[str]]
    alignment: list[AlignedWordPair]
    phrases: list[Phrase]


class WordGraphArc(Model):
    prev_state: int
    next_state: int
    score: float
    target_tokens: list[str]
    confidences: list[float]
    source_segment_start: int
    source_segment_end: int
    alignment: list[AlignedWordPair]
    sources: list[list[str]]


class WordGraph(Model):
    source_tokens: list[str]
    initial_state_score: float
    final_states: list[int]
    arcs: list[WordGraphArc]


class PrefixRequest(Model):
    segment: str
    prefix: str
    n: int = 1


class SegmentPair(Model):
    source_segment: str
    target_segment: str
    sentence_start: bool


class LanguageInfo(Model):
    engine_type: str
    is_native: bool
    internal_code: str | None = None


class Queue(Model):
    size: int
    engine_type: str


class ModelDownloadUrl(Model):
    url: str
    model_revision: int
    expires_at: datetime


class HealthReportEntry(Model):
    status: str = Field(description="Healthy, Degraded or Unhealthy")
    duration: str = Field(description="How long the check took, as a .NET TimeSpan: `00:00:00.0123456`")
    description: str | None = None
    exception: str | None = None
    data: dict[str, str] | None = None


class HealthReport(Model):
    status: str = Field(description="The worst of the entries' statuses: Healthy, Degraded or Unhealthy")
    total_duration: str
    results: dict[str, HealthReportEntry]


class DeploymentInfo(Model):
    deployment_version: str
    asp_net_core_environment: str


class Error(Model):
    message: str


class Pretranslation(Model):
    """Serval's PretranslationDto; `refs` is the deprecated alias of `targetRefs`."""

    text_id: str
    refs: list[str] = Field(json_schema_extra={"deprecated": True})
    source_refs: list[str]
    target_refs: list[str]
    translation: str
    confidence: float


def pretranslation_dto(row: PretranslationRow) -> Pretranslation:
    target_refs = [str(ref) for ref in row.target_refs]
    return Pretranslation(
        text_id=row.text_id,
        refs=target_refs,
        source_refs=[str(ref) for ref in row.source_refs],
        target_refs=target_refs,
        translation=row.translation,
        confidence=row.confidence,
    )


class WebhookConfig(Model):
    payload_url: str
    secret: str
    events: list[WebhookEvent]


class Webhook(Model):
    """Serval's WebhookDto: the secret is never part of it."""

    id: str
    url: str
    payload_url: str
    events: list[WebhookEvent]


def webhook_dto(base_url: str, hook: WebhookRow) -> Webhook:
    return Webhook(
        id=hook.id,
        url=hook_url(base_url, hook.id),
        payload_url=hook.payload_url,
        events=[WebhookEvent(e) for e in hook.events],
    )


def engine_dto(base_url: str, engine: EngineRow) -> TranslationEngine:
    return TranslationEngine(
        id=engine.id,
        url=engine_url(base_url, engine.id),
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


def build_dto(base_url: str, build: BuildRow) -> TranslationBuild:
    url = engine_url(base_url, build.engine_id)
    return TranslationBuild(
        id=build.id,
        url=build_url(base_url, build.engine_id, build.id),
        revision=build.revision,
        name=build.name,
        engine=ResourceLink(id=build.engine_id, url=url),
        step=build.step,
        percent_completed=build.progress,
        progress=build.progress,
        message=build.message,
        queue_depth=build.queue_depth,
        state=build.state,
        train_on=training_corpora(base_url, build.engine_id, build.train_on),
        pretranslate=pretranslate_corpora(base_url, build.engine_id, build.pretranslate),
        date_created=build.date_created,
        date_started=build.date_started,
        date_completed=build.date_finished,
        date_finished=build.date_finished,
        options=build.options,
        deployment_version=build.deployment_version,
        execution_data=_execution_data(build.execution_data),
        phases=phases_dto(build.phases),
        analysis=None if build.analysis is None else [_analysis(a) for a in build.analysis],
        target_quote_convention=build.target_quote_convention,
        can_denormalize_quotes=bool(build.target_quote_convention),
    )


def recorded_execution_data(recorded: build_record.ExecutionData | None) -> dict[str, Any]:
    """The fields `recorded` holds (and any key an older row kept) under their wire names."""
    if recorded is None:
        return {}
    return {k: v for k, v in recorded.model_dump(mode="json", by_alias=True).items() if v is not None}


def _execution_data(recorded: build_record.ExecutionData | None) -> dict[str, Any]:
    """Serval's clients require the counts and warnings, so a build without them still has them."""
    return {"trainCount": 0, "pretranslateCount": 0, "warnings": [], **recorded_execution_data(recorded)}


def phases_dto(phases: list[build_record.Phase] | None) -> list[Phase] | None:
    if not phases:
        return None
    return [Phase(stage=p.stage, step=p.step, step_count=p.step_count, started=p.started) for p in phases]


def _analysis(entry: build_record.CorpusAnalysis) -> ParallelCorpusAnalysis:
    return ParallelCorpusAnalysis(
        parallel_corpus_ref=entry.parallel_corpus_ref,
        source_quote_convention=entry.source_quote_convention,
        target_quote_convention=entry.target_quote_convention,
        can_denormalize_quotes=entry.can_denormalize_quotes,
    )


_SOURCE_NAMES = (
    (core.TranslationSource.PRIMARY, "Primary"),
    (core.TranslationSource.SECONDARY, "Secondary"),
    (core.TranslationSource.HUMAN, "Human"),
)


def source_names(source: core.TranslationSource) -> list[str]:
    """Serval's names of a word's sources."""
    return [name for flag, name in _SOURCE_NAMES if flag in source]


def result_dto(result: core.TranslationResult) -> TranslationResult:
    return TranslationResult(
        translation=result.translation,
        source_tokens=list(result.source_tokens),
        target_tokens=list(result.target_tokens),
        confidences=list(result.confidences),
        sources=[source_names(source) for source in result.sources],
        alignment=[
            AlignedWordPair(source_index=a.source_index, target_index=a.target_index)
            for a in result.alignment
        ],
        phrases=[
            Phrase(
                source_segment_start=p.source_segment_start,
                source_segment_end=p.source_segment_end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in result.phrases
        ],
    )


def word_graph_dto(graph: core.WordGraph) -> WordGraph:
    return WordGraph(
        source_tokens=list(graph.source_tokens),
        initial_state_score=graph.initial_state_score,
        final_states=list(graph.final_states),
        arcs=[
            WordGraphArc(
                prev_state=arc.prev_state,
                next_state=arc.next_state,
                score=arc.score,
                target_tokens=list(arc.target_tokens),
                confidences=list(arc.confidences),
                source_segment_start=arc.source_segment_start,
                source_segment_end=arc.source_segment_end,
                alignment=[
                    AlignedWordPair(source_index=a.source_index, target_index=a.target_index)
                    for a in arc.alignment
                ],
                sources=[source_names(source) for source in arc.sources],
            )
            for arc in graph.arcs
        ],
    )
