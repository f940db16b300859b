"""One build job, start to finish: train (or publish the base model), pretranslate, complete.

Everything reaches the API service through the platform RPCs; inside a ClearML task the same
progress also goes to ClearML. A cancel (SIGTERM from the launcher, or the ClearML task stopped)
is noticed between steps and within training every step; a canceled job publishes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import grpc

from build_jobs.clearml_task import ClearMLTask
from build_jobs.finetune import Canceled
from build_jobs.progress import BuildProgress
from build_jobs.publish import publish_inference_only
from build_jobs.report import PlatformReporter, RetryPolicy
from serval.translation.v1 import platform_pb2
from serval_common.build_options import BuildOptions
from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec
from serval_common.names import check_id
from serval_common.settings import Settings
from serval_common.store import ModelStore, store_from_settings

log = logging.getLogger(__name__)

# Where pretranslation sits in the build's progress, after training or after publishing.
PRETRANSLATE_AFTER_TRAINING = (0.95, 0.99)
PRETRANSLATE_AFTER_PUBLISHING = (0.5, 0.99)


@dataclass(frozen=True)
class Outcome:
    corpus_size: int
    confidence: float
    scores: dict[str, float]
    summary: str
    """the build's last message, after `published revision N`"""


def run_job(args: JobSpec, settings: Settings) -> int:
    """Run the build; every failure is reported as BuildFaulted with a message a user can act on."""
    extra = {"build_id": args.build_id, "engine_id": args.engine_id}
    with _sigterm_cancels() as canceled:
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
        try:
            platform.started()
            check_id("build", args.build_id)
            check_id("engine", args.engine_id)
            options = BuildOptions.parse(args.options_json)
            base_model = options.base_model or settings.jobs.default_base_model
            store = store_from_settings(settings, args.store_url)
            _report_quote_conventions(args, store, platform)
            if args.train:
                outcome = _train(args, options, base_model, store, progress)
                window = PRETRANSLATE_AFTER_TRAINING
            else:
                outcome = _publish_base_model(args, base_model, store, progress)
                window = PRETRANSLATE_AFTER_PUBLISHING
            pretranslated = _pretranslate(args, options, store, progress, window)
            platform.execution_data(args.engine_id, _execution_data(args, outcome, pretranslated))
            progress.update(1.0, f"published revision {args.revision}{outcome.summary}")
            platform.completed(corpus_size=outcome.corpus_size, confidence=outcome.confidence)
            log.info("build completed", extra={**extra, **{k: f"{v:.2f}" for k, v in outcome.scores.items()}})
            return 0
        except Canceled:
            log.info("build canceled; nothing published", extra=extra)
            with contextlib.suppress(grpc.RpcError):
                platform.canceled()
            return CANCELED_EXIT_CODE
        except Exception as exc:
            if canceled.is_set():
                log.info("build canceled while reporting; nothing more published", extra=extra)
                return CANCELED_EXIT_CODE
            log.exception("build failed", extra=extra)
            with contextlib.suppress(grpc.RpcError):
                platform.faulted(user_message(exc))
            return 1
        finally:
            platform.close()
            if task is not None:
                task.close()


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


def _publish_base_model(
    args: JobSpec, base_model: str, store: ModelStore, progress: BuildProgress
) -> Outcome:
    progress.update(0.1, f"publishing base model {base_model} as revision {args.revision}")
    publish_inference_only(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        base_model=base_model,
        source_language=args.source_language,
        target_language=args.target_language,
    )
    progress.update(0.5, f"published revision {args.revision} (the base model's weights)")
    return Outcome(corpus_size=0, confidence=0.0, scores={}, summary=" (the base model's weights)")


def _train(
    args: JobSpec, options: BuildOptions, base_model: str, store: ModelStore, progress: BuildProgress
) -> Outcome:
    from build_jobs.train_build import train_revision

    trained = train_revision(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        base_model=base_model,
        source_language=args.source_language,
        target_language=args.target_language,
        options=options,
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
    return Outcome(
        corpus_size=trained.train_pairs,
        confidence=scores.get("chrf_after", 0.0),
        scores=scores,
        summary=summary,
    )


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
    store: ModelStore,
    progress: BuildProgress,
    window: tuple[float, float],
) -> int:
    """Pretranslate with the published revision and stream the rows before the build completes."""
    from build_jobs.pretranslate import pretranslate_revision

    rows = pretranslate_revision(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        source_code=args.source_language,
        target_code=args.target_language,
        beams=options.pretranslate_beams,
        batch_size=options.pretranslate_batch_size,
        progress=progress.within(*window, "Inference", "pretranslating segments"),
        should_cancel=progress.should_cancel,
    )
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
