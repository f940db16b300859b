"""One build job, start to finish: train (or take the base model), pretranslate, publish, complete.

Publishing comes last, so a cancel or a failure in any earlier phase leaves nothing in the model
store: the job trains into a local folder, pretranslates with that model, and only then uploads
`models/{engineId}/{revision}/` (files first, manifest last), refusing a folder that holds
anything. A cancel or failure during the upload removes what was uploaded; a manifest already
written for a build that then does not complete is removed by the API service, which moves the
engine to a revision only when the build completes (docs/build-options.md, "Phases and cancels").

Everything reaches the API service through the platform RPCs; inside a ClearML task the same
progress also goes to ClearML. A cancel (SIGTERM from the launcher, or the ClearML task stopped)
is noticed between steps, within training every step, and between uploaded files.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from build_jobs.clearml_task import ClearMLTask
from build_jobs.finetune import Canceled
from build_jobs.progress import BuildProgress
from build_jobs.publish import base_model_prefix, inference_only_manifest, publish_revision
from build_jobs.report import PlatformReporter, RetryPolicy
from serval.translation.v1 import platform_pb2
from serval_common.build_options import BuildOptions
from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec
from serval_common.manifest import Manifest
from serval_common.names import check_id
from serval_common.settings import Settings
from serval_common.store import ModelStore, store_from_settings

log = logging.getLogger(__name__)

# Where pretranslation sits in the build's progress, after training or after taking the base model.
PRETRANSLATE_AFTER_TRAINING = (0.9, 0.96)
PRETRANSLATE_BASE_MODEL = (0.1, 0.9)


@dataclass(frozen=True)
class Outcome:
    corpus_size: int
    confidence: float
    scores: dict[str, float]
    summary: str
    """the build's last message, after `published revision N`"""


@dataclass(frozen=True)
class Prepared:
    """The revision to publish: a trained model in local folders, or (no folders) the base
    model's weights."""

    outcome: Outcome
    manifest: Manifest
    ct2_dir: Path | None = None
    hf_dir: Path | None = None


def run_job(args: JobSpec, settings: Settings) -> int:
    """Run the build; every failure is reported as BuildFaulted with a message a user can act on."""
    with _sigterm_cancels() as canceled:
        return run_build(args, settings, canceled)


def run_build(
    args: JobSpec, settings: Settings, canceled: threading.Event, *, store: ModelStore | None = None
) -> int:
    """`run_job` without the SIGTERM handler: `canceled` is the cancel request; `store`, when
    given, replaces the one `args` names."""
    extra = {"build_id": args.build_id, "engine_id": args.engine_id}
    platform = PlatformReporter(
        args.api_address,
        args.build_id,
        args.job_token,
        RetryPolicy(budget_s=settings.jobs.report_retry_s),
        ca_file=settings.jobs.tls_ca_file,
        server_name=settings.jobs.tls_server_name,
        stop=canceled,
    )
    task = ClearMLTask.attach(f"serval build {args.build_id}")
    progress = BuildProgress(platform, task, canceled)
    published = False
    try:
        platform.started()
        check_id("build", args.build_id)
        check_id("engine", args.engine_id)
        if args.engine_type == "statistical":
            from build_jobs.alignment.job import build_alignment

            aligned = build_alignment(args, store or store_from_settings(settings, args.store_url), progress)
            published = True
            progress.update(1.0, f"published revision {args.revision}{aligned.summary}")
            platform.completed(corpus_size=aligned.corpus_size, confidence=aligned.confidence)
            log.info("build completed", extra={**extra, "word_align_count": aligned.aligned})
            return 0
        if args.engine_type == "smt-transfer":
            store = store or store_from_settings(settings, args.store_url)
            _report_quote_conventions(args, store, platform)
            outcome, pretranslated = _smt_build(args, store, progress)
            published = True
        else:
            options = BuildOptions.parse(args.options_json)
            base_model = options.base_model or settings.jobs.default_base_model
            store = store or store_from_settings(settings, args.store_url)
            _report_quote_conventions(args, store, platform)
            with tempfile.TemporaryDirectory(prefix="serval-build-") as work:
                if args.train:
                    prepared = _train(args, options, base_model, store, progress, Path(work))
                else:
                    prepared = _take_base_model(args, base_model, store, progress)
                pretranslated = _pretranslate(args, options, base_model, store, progress, prepared)
                progress.update(0.97 if args.train else 0.95, f"publishing revision {args.revision}")
                publish_revision(
                    store,
                    prepared.manifest,
                    prepared.ct2_dir,
                    prepared.hf_dir,
                    check=lambda: _check_cancel(progress),
                )
                published = True
            outcome = prepared.outcome
        platform.execution_data(args.engine_id, _execution_data(args, outcome, pretranslated))
        progress.update(1.0, f"published revision {args.revision}{outcome.summary}")
        platform.completed(corpus_size=outcome.corpus_size, confidence=outcome.confidence)
        log.info("build completed", extra={**extra, **{k: f"{v:.2f}" for k, v in outcome.scores.items()}})
        return 0
    except Canceled:
        log.info("build canceled", extra={**extra, "published": published})
        with contextlib.suppress(grpc.RpcError):
            platform.canceled()
        return CANCELED_EXIT_CODE
    except Exception as exc:
        if canceled.is_set():
            log.info("build canceled while reporting", extra={**extra, "published": published})
            return CANCELED_EXIT_CODE
        log.exception("build failed", extra={**extra, "published": published})
        with contextlib.suppress(grpc.RpcError):
            platform.faulted(user_message(exc))
        return 1
    finally:
        platform.close()
        if task is not None:
            task.close()


def _check_cancel(progress: BuildProgress) -> None:
    if progress.should_cancel():
        raise Canceled("the build was canceled")


def user_message(exc: BaseException) -> str:
    """The fault message a client sees; out-of-memory says which options to lower."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, MemoryError) or "out of memory" in text.lower():
        return (
            f"out of memory while building ({text.splitlines()[0][:200]}): lower batchSize or "
            "maxLength (raise gradientAccumulation to keep the effective batch), or use a smaller "
            "base model"
        )
    return text


def _take_base_model(args: JobSpec, base_model: str, store: ModelStore, progress: BuildProgress) -> Prepared:
    progress.update(0.1, f"revision {args.revision} serves the base model {base_model}")
    manifest = inference_only_manifest(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        base_model=base_model,
        source_language=args.source_language,
        target_language=args.target_language,
    )
    outcome = Outcome(corpus_size=0, confidence=0.0, scores={}, summary=" (the base model's weights)")
    return Prepared(outcome=outcome, manifest=manifest)


def _train(
    args: JobSpec,
    options: BuildOptions,
    base_model: str,
    store: ModelStore,
    progress: BuildProgress,
    work: Path,
) -> Prepared:
    from build_jobs.train_build import train_model

    trained = train_model(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        base_model=base_model,
        source_language=args.source_language,
        target_language=args.target_language,
        options=options,
        work=work,
        phase=progress.update,
        on_train_step=progress.train_step,
        should_cancel=progress.should_cancel,
    )
    scores = trained.manifest.scores
    for name, value in scores.items():
        metric, when = name.rsplit("_", 1)
        progress.scalar(metric, when, value, 0 if when == "before" else trained.steps)
    summary = (
        f": trained {trained.steps} steps in {trained.seconds:.0f} s, "
        f"chrF {scores['chrf_before']:.1f} → {scores['chrf_after']:.1f} "
        f"({trained.train_pairs} training pairs, {trained.eval_pairs} held out)"
    )
    outcome = Outcome(
        corpus_size=trained.train_pairs,
        confidence=scores.get("chrf_after", 0.0),
        scores=scores,
        summary=summary,
    )
    return Prepared(
        outcome=outcome, manifest=trained.manifest, ct2_dir=trained.ct2_dir, hf_dir=trained.hf_dir
    )


def _smt_build(args: JobSpec, store: ModelStore, progress: BuildProgress) -> tuple[Outcome, int]:
    """An `smt-transfer` build (`build_jobs.smt.build`): train, pretranslate, publish."""
    from build_jobs.smt.build import build_smt

    smt = build_smt(args, store, progress)
    outcome = Outcome(
        corpus_size=smt.corpus_size, confidence=smt.confidence, scores=smt.scores, summary=smt.summary
    )
    return outcome, smt.pretranslated


def _report_quote_conventions(args: JobSpec, store: ModelStore, platform: PlatformReporter) -> None:
    """Detect the target text's quotation-mark conventions and report them before the build
    publishes, so they are there when its pretranslations are."""
    from build_jobs.quotes import detect, read_target_texts

    entries = read_target_texts(store, args.build_id)
    if entries is None:
        return
    detection = detect(entries)
    platform.corpus_analysis(args.engine_id, [(c.corpus_id, c.convention) for c in detection.corpora])
    platform.target_quote_convention(args.engine_id, detection.convention)
    log.info(
        "target quote convention",
        extra={
            "build_id": args.build_id,
            "engine_id": args.engine_id,
            "convention": detection.convention or "none",
            "score": round(detection.score, 3),
            "corpora": {c.corpus_id: c.convention or "none" for c in detection.corpora},
        },
    )


def _pretranslate(
    args: JobSpec,
    options: BuildOptions,
    base_model: str,
    store: ModelStore,
    progress: BuildProgress,
    prepared: Prepared,
) -> int:
    """Pretranslate with the model the build is about to publish (the trained model's local
    folder, or the base model) and stream the rows; clients see them once the build completes."""
    from build_jobs.pretranslate import decoding_limit, pretranslate, pretranslate_stored_model

    if prepared.ct2_dir is not None:
        report = progress.within(*PRETRANSLATE_AFTER_TRAINING, "Inference", "pretranslating segments")
        rows = pretranslate(
            store,
            args.build_id,
            prepared.ct2_dir,
            args.source_language,
            args.target_language,
            beams=options.pretranslate_beams,
            batch_size=options.pretranslate_batch_size,
            max_length=decoding_limit(prepared.manifest.max_positions),
            progress=report,
            should_cancel=progress.should_cancel,
        )
    else:
        report = progress.within(*PRETRANSLATE_BASE_MODEL, "Inference", "pretranslating segments")
        rows = pretranslate_stored_model(
            store,
            base_model_prefix(base_model),
            build_id=args.build_id,
            source_code=args.source_language,
            target_code=args.target_language,
            beams=options.pretranslate_beams,
            batch_size=options.pretranslate_batch_size,
            progress=report,
            should_cancel=progress.should_cancel,
        )
    _check_cancel(progress)
    if rows:
        progress.platform.insert_pretranslations(args.engine_id, rows)
    return len(rows)


def _execution_data(args: JobSpec, outcome: Outcome, pretranslated: int) -> platform_pb2.ExecutionData:
    return platform_pb2.ExecutionData(
        train_count=outcome.corpus_size,
        pretranslate_count=pretranslated,
        resolved_source_language=args.source_language,
        resolved_target_language=args.target_language,
    )


@contextmanager
def _sigterm_cancels() -> Iterator[threading.Event]:
    """SIGTERM (the launcher's cancel) sets the event the job polls between and within steps."""
    canceled = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield canceled
        return

    def on_sigterm(_signum: int, _frame: object) -> None:
        canceled.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield canceled
    finally:
        signal.signal(signal.SIGTERM, previous)
