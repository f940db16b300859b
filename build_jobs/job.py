"""One build job, start to finish, reported through the platform RPCs."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from build_jobs.finetune import Canceled
from build_jobs.publish import publish_inference_only
from build_jobs.report import PlatformReporter
from serval_common.build_options import BuildOptions
from serval_common.jobs import JobSpec
from serval_common.settings import Settings
from serval_common.store import ModelStore, store_from_settings

log = logging.getLogger(__name__)

CANCELED_EXIT_CODE = 143
"""128 + SIGTERM: the launcher terminated the job because the build was canceled."""


def run_job(args: JobSpec, settings: Settings) -> int:
    """Run the build; every failure is reported as BuildFaulted with a message a user can act on."""
    reporter = PlatformReporter(args.api_address, args.build_id, args.job_token)
    extra = {"build_id": args.build_id, "engine_id": args.engine_id}
    try:
        reporter.started()
        options = BuildOptions.parse(args.options_json)
        base_model = options.base_model or settings.jobs.default_base_model
        store = store_from_settings(settings, args.store_url)
        if args.train:
            return _run_training(args, options, base_model, store, reporter, extra)
        reporter.progress(1, 0.5, f"publishing base model {base_model} as revision {args.revision}")
        publish_inference_only(
            store,
            engine_id=args.engine_id,
            revision=args.revision,
            build_id=args.build_id,
            base_model=base_model,
            source_language=args.source_language,
            target_language=args.target_language,
        )
        reporter.progress(2, 1.0, "published")
        reporter.completed(corpus_size=0, confidence=0.0)
        log.info("build completed", extra=extra)
        return 0
    except Canceled:
        log.info("build canceled; nothing published", extra=extra)
        return CANCELED_EXIT_CODE
    except Exception as exc:
        log.exception("build failed", extra=extra)
        reporter.faulted(str(exc) or type(exc).__name__)
        return 1
    finally:
        reporter.close()


def _run_training(
    args: JobSpec,
    options: BuildOptions,
    base_model: str,
    store: ModelStore,
    reporter: PlatformReporter,
    extra: dict[str, str],
) -> int:
    from build_jobs.train_build import train_revision

    step = 0

    def phase(fraction: float, message: str) -> None:
        nonlocal step
        step += 1
        reporter.progress(step, fraction, message)

    with _sigterm_cancels() as canceled:
        trained = train_revision(
            store,
            engine_id=args.engine_id,
            revision=args.revision,
            build_id=args.build_id,
            base_model=base_model,
            source_language=args.source_language,
            target_language=args.target_language,
            options=options,
            phase=phase,
            should_cancel=canceled.is_set,
        )
    scores = trained.manifest.scores
    reporter.progress(step + 1, 1.0, f"published revision {args.revision}")
    reporter.completed(corpus_size=trained.train_pairs, confidence=scores.get("chrf_after", 0.0))
    log.info("build completed", extra={**extra, **{k: f"{v:.2f}" for k, v in scores.items()}})
    return 0


@contextmanager
def _sigterm_cancels() -> Iterator[threading.Event]:
    """SIGTERM (the launcher's cancel) sets the event the training loop polls every step."""
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
