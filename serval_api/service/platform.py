"""What build jobs report. Each job holds a one-time token that authorizes it for its own build."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

from serval_api.db.models import BuildRow, BuildState, EngineRow, utcnow
from serval_api.db.models.build_record import CorpusAnalysis, ExecutionData, Phase
from serval_api.errors import InvalidArgument, NotFound
from serval_api.service import confidences, diagnostics, limits, pretranslations, revisions, train_segments
from serval_api.service.build_transitions import apply_job_change
from serval_api.service.context import Services
from serval_common.build_options import is_micro_build
from serval_common.families import family
from serval_common.fine_tune_scores import chrf_worse, worse_sentence
from serval_common.jobs import CANCELED_EXIT_CODE
from serval_common.manifest import Manifest, ResolvedRevision, resolve_revision
from serval_common.model_revision import ModelRevision
from serval_common.redact import error_reference, redact, secret_values

log = logging.getLogger(__name__)

MAX_COUNT = 2**31 - 1
"""The largest corpus size the engine's column holds."""


async def build_started(services: Services, build_id: str) -> None:
    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.state = BuildState.ACTIVE.value
        build.date_started = build.date_started or utcnow()

    await _report(services, build_id, "build started", change)


async def update_build_status(
    services: Services,
    build_id: str,
    *,
    step: int,
    progress: float | None = None,
    message: str | None = None,
    queue_depth: int | None = None,
    phases: list[Phase] | None = None,
) -> None:
    limits.items("phases", phases or (), services.settings.api.max_list_items)
    if progress is not None:
        limits.finite("progress", progress)
    if message is not None:
        message = _shown(services, message)

    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.step = step
        if phases:
            build.phases = phases
        if progress is not None:
            build.progress = min(max(progress, 0.0), 1.0)
        if message is not None:
            build.message = message
        if queue_depth is not None:
            build.queue_depth = queue_depth

    await _report(services, build_id, "build status", change, level=logging.DEBUG)


async def build_completed(services: Services, build_id: str, *, corpus_size: int, confidence: float) -> None:
    limits.finite("confidence", confidence)
    if corpus_size < 0:
        raise InvalidArgument(f"corpus_size: expected 0 or more, not {corpus_size}")

    published = await _published_revision(services, build_id)
    weights = None if published is None else published.weights
    summary = await confidences.build_summary(services, build_id)

    def change(build: BuildRow, engine: EngineRow) -> None:
        if family(engine.type).pretranslates:
            build.execution_data = _with_confidences(
                build, summary, services.settings.jobs.default_base_model
            )
        if published is not None:
            build.execution_data = _with_training(build.execution_data, published.manifest)
        build.state = BuildState.COMPLETED.value
        build.date_finished = utcnow()
        build.progress = 1.0
        engine.model_revision = build.target_model_revision
        engine.model_weights = weights
        engine.model_learns = published is not None and published.manifest.learns_segments
        if not is_micro_build(build.options):
            engine.pretranslated_revision = build.target_model_revision
        engine.corpus_size = corpus_size
        if train_segments.learns_segments(engine.type):  # Serval: the pairs plus those learned since
            engine.corpus_size = corpus_size + train_segments.learned_since(build)
        engine.confidence = confidence

    prefetched = await _prefetch(services, build_id, weights or "")
    build = await _report(services, build_id, "build completed", change)
    if build is not None and build.state == BuildState.COMPLETED.value and build.target_model_revision:
        services.dispatcher.revision_published(
            build.engine_id,
            build.target_model_revision,
            weights=weights or "",
            prefetched=prefetched is not None,
        )
    elif prefetched is not None:
        services.dispatcher.revision_withdrawn(*prefetched)


def _with_confidences(build: BuildRow, summary: confidences.Summary, default_model: str) -> ExecutionData:
    """The execution data with Serval 1.20's `averagePretranslationConfidence` (0 when the build
    pretranslated nothing, as Serval) and its low books' `MODEL-0003` diagnostics."""
    model = str((build.options or {}).get("baseModel") or default_model)
    return summary.execution_data(build.execution_data, model)


def _with_training(recorded: ExecutionData | None, manifest: Manifest) -> ExecutionData | None:
    """The execution data with what a fine-tuned revision's manifest says of its training: the
    hyperparameters it used (`CONFIG-1004`) and, when it lowered the held-out chrF, a `MODEL-1001`
    warning, also in `warnings` for clients that read only those."""
    hyperparameters = manifest.hyperparameters
    if hyperparameters is None:
        return recorded
    recorded = recorded or ExecutionData()
    added = [diagnostics.training_hyperparameters(hyperparameters.describe(), hyperparameters.wire())]
    warnings = list(recorded.warnings)
    before, after = manifest.scores.get("chrf_before"), manifest.scores.get("chrf_after")
    if before is not None and after is not None and chrf_worse(before, after):
        sentence = worse_sentence(
            before, after, published=True, learning_rate=hyperparameters.values.learning_rate
        )
        added.append(diagnostics.worse_chrf(sentence, before, after, published=True))
        warnings += [] if sentence in warnings else [sentence]
    return diagnostics.merged(recorded.updated(warnings=warnings), added)


async def _published_revision(services: Services, build_id: str) -> ResolvedRevision | None:
    """The manifests of the revision the build published (two small store reads: its weights
    identity and what its training reports); None for a build that published none (the echo
    types) or when the store cannot say now: the revision then serves all the same, and nodes
    report its weights once one loads it."""
    async with services.db.session() as s:
        build = await s.get(BuildRow, build_id)
        engine = None if build is None else await s.get(EngineRow, build.engine_id)
    if build is None or not build.build_state.is_running or not build.target_model_revision:
        return None
    if engine is None or family(engine.type).served_here:
        return None
    location = ModelRevision(build.engine_id, build.target_model_revision).location
    try:
        resolved = await asyncio.to_thread(resolve_revision, services.store, location)
    except Exception as exc:
        log.warning(
            "could not read the published revision's weights; nodes report them once one loads it",
            extra={"build_id": build_id, "model": location, "error": redact(str(exc))},
        )
        return None
    return resolved


async def _prefetch(services: Services, build_id: str, weights: str) -> tuple[str, int] | None:
    """Have the nodes serving the engine load the build's revision before it reads Completed
    (`Placement.prefetch`, bounded by `api.completion_load_wait_s`): the engine's next translate
    is then answered by it. The (engine id, revision) asked for; None when nothing was."""
    async with services.db.session() as s:
        build = await s.get(BuildRow, build_id)
    if build is None or not build.build_state.is_running or not build.target_model_revision:
        return None
    await services.dispatcher.prefetch(
        build.engine_id,
        build.target_model_revision,
        services.settings.api.completion_load_wait_s,
        weights=weights,
    )
    return build.engine_id, build.target_model_revision


async def update_execution_data(services: Services, build_id: str, reported: ExecutionData) -> None:
    """Merge what the job learned (train/pretranslate counts, warnings, resolved languages): the
    fields `reported` sets replace those recorded, its warnings join theirs."""
    limits.items("execution_data.warnings", reported.warnings, services.settings.api.max_list_items)

    def change(build: BuildRow, _engine: EngineRow) -> None:
        recorded = build.execution_data or ExecutionData()
        new = [w for w in dict.fromkeys(reported.warnings) if w not in recorded.warnings]
        changes = {name: getattr(reported, name) for name in reported.model_fields_set}
        merged = recorded.updated(**{**changes, "warnings": [*recorded.warnings, *new]})
        build.execution_data = diagnostics.merged(merged, map(diagnostics.job_warning, new))

    await _report(services, build_id, "build execution data", change, level=logging.DEBUG)


QUOTE_CONVENTION_CHARS = limits.column_width(BuildRow, "target_quote_convention")


def _convention(field: str, name: str | None) -> str | None:
    """A reported convention name; empty means none was recognised."""
    if not name:
        return None
    return limits.text(field, name, QUOTE_CONVENTION_CHARS)


def can_denormalize(name: str | None) -> bool:
    """Whether the API service's sil-machine knows the convention, so USFM can be denormalized into it."""
    from machine.punctuation_analysis import STANDARD_QUOTE_CONVENTIONS

    return name is not None and STANDARD_QUOTE_CONVENTIONS.get_quote_convention_by_name(name) is not None


async def update_target_quote_convention(services: Services, build_id: str, name: str | None) -> None:
    """The convention the job found in the build's target text as a whole (Serval's
    `targetQuoteConvention`); None or empty: none found."""
    convention = _convention("target_quote_convention", name)

    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.target_quote_convention = convention

    await _report(services, build_id, "build target quote convention", change)


@dataclass(frozen=True)
class AnalysisReport:
    """What a job reports of one parallel corpus (UpdateParallelCorpusAnalysis)."""

    corpus_id: str
    target_quote_convention: str | None
    source_quote_convention: str | None = None


async def update_parallel_corpus_analysis(
    services: Services, build_id: str, analyses: list[AnalysisReport]
) -> None:
    """Per corpus the build exported: Serval's `ParallelCorpusAnalysis`, replacing what the job
    reported before."""
    limits.items("parallel_corpus_analysis", analyses, services.settings.api.max_list_items)
    entries = []
    for i, analysis in enumerate(analyses):
        where = f"parallel_corpus_analysis[{i}]"
        corpus_id = analysis.corpus_id
        if not corpus_id or len(corpus_id) > limits.CORPUS_ID_CHARS:
            raise InvalidArgument(
                f"{where}.parallel_corpus_id must hold 1 to {limits.CORPUS_ID_CHARS} characters"
            )
        limits.no_nul(f"{where}.parallel_corpus_id", corpus_id)
        target = _convention(f"{where}.target_quote_convention", analysis.target_quote_convention)
        entries.append(
            CorpusAnalysis(
                parallel_corpus_ref=corpus_id,
                target_quote_convention=target or "",
                can_denormalize_quotes=can_denormalize(target),
                source_quote_convention=_convention(
                    f"{where}.source_quote_convention", analysis.source_quote_convention
                ),
            )
        )

    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.analysis = entries

    await _report(services, build_id, "build corpus analysis", change)


async def increment_corpus_size(services: Services, build_id: str, count: int) -> None:
    if count < 0:
        raise InvalidArgument(f"count: expected 0 or more, not {count}")

    def change(_build: BuildRow, engine: EngineRow) -> None:
        if engine.corpus_size + count > MAX_COUNT:
            raise InvalidArgument(f"count: the engine's corpus size would exceed {MAX_COUNT}")
        engine.corpus_size += count

    await _report(services, build_id, "engine corpus size", change, level=logging.DEBUG)


def _shown(services: Services, message: str) -> str:
    """A job's message as clients read it: a job's errors name store URLs and local paths."""
    return limits.reported_text(redact(message, secret_values(services.settings)), limits.BUILD_MESSAGE_CHARS)


async def build_faulted(services: Services, build_id: str, message: str) -> None:
    log.warning("build job reported a fault", extra={"build_id": build_id, "error": message})
    message = _shown(services, message)

    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.state = BuildState.FAULTED.value
        build.message = message
        build.date_finished = utcnow()
        build.execution_data = diagnostics.with_fault(build.execution_data, message)

    await _report(services, build_id, "build faulted", change, level=logging.WARNING)


async def build_canceled(services: Services, build_id: str) -> None:
    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.state = BuildState.CANCELED.value
        build.date_finished = utcnow()

    await _report(services, build_id, "build canceled", change)


async def build_restarting(services: Services, build_id: str) -> None:
    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.state = BuildState.PENDING.value

    build = await _report(services, build_id, "build restarting", change)
    if build is not None:
        await pretranslations.discard(services, build)


async def _report(
    services: Services,
    build_id: str,
    event: str,
    change: Callable[[BuildRow, EngineRow], None],
    *,
    level: int = logging.INFO,
) -> BuildRow | None:
    build = await apply_job_change(services, build_id, change)
    if build is not None:
        log.log(
            level,
            event,
            extra={"build_id": build_id, "engine_id": build.engine_id, "state": build.state},
        )
        if not build.build_state.is_running:
            await pretranslations.build_finished(services, build)
            await revisions.discard_unfinished(services, build)
    return build


async def queue_positions(services: Services, positions: dict[str, int]) -> None:
    """The launcher's queue moved: each waiting build learns how many jobs are ahead of it."""
    for build_id, ahead in positions.items():

        def change(build: BuildRow, _engine: EngineRow, ahead: int = ahead) -> None:
            build.queue_depth = ahead

        with contextlib.suppress(NotFound):
            await apply_job_change(services, build_id, change)


async def job_exited(services: Services, build_id: str, exit_code: int, log_tail: str) -> None:
    """A job ended; a build it left running becomes Canceled when the job was stopped (exit 143,
    SIGTERM: a cancel from outside, such as a stopped ClearML task) and Faulted otherwise."""
    stopped = exit_code in (CANCELED_EXIT_CODE, -signal.SIGTERM)
    reason = (
        "the build job was stopped"
        if stopped
        else "the build job exited without reporting completion"
        if exit_code == 0
        else f"the build job exited with code {exit_code}"
    )
    tail = log_tail.strip()
    if tail and not stopped:
        last = redact(tail.splitlines()[-1], secret_values(services.settings))
        message = error_reference(f"{reason}: {last}", tail, log, {"build_id": build_id})
    else:
        message = reason
    message = limits.reported_text(message, limits.BUILD_MESSAGE_CHARS)

    def change(build: BuildRow, _engine: EngineRow) -> None:
        build.state = (BuildState.CANCELED if stopped else BuildState.FAULTED).value
        build.message = message
        build.date_finished = utcnow()
        if not stopped:
            build.execution_data = diagnostics.with_fault(build.execution_data, message)

    with contextlib.suppress(NotFound):
        if await _report(services, build_id, "build job exited", change, level=logging.WARNING) is None:
            await _discard_after_exit(services, build_id)


async def _discard_after_exit(services: Services, build_id: str) -> None:
    """The job of a build already Faulted or Canceled may have written to its revision folder
    after the build was marked (a cancel lands while the manifest is written); now that the job
    is gone, nothing more can arrive."""
    async with services.db.session() as s:
        build = await s.get(BuildRow, build_id)
    if build is not None:
        await revisions.discard_unfinished(services, build)
