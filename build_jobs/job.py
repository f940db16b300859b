"""One build job, start to finish: train (or take the base model), pretranslate, publish, complete.

`run_build` is the template every family's build runs through (`build_jobs/template.py`): the
family's `FamilyBuildJob` (the registry names it) builds and publishes; reporting, cancels and
faults are handled here once.

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
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from build_jobs.clearml_task import ClearMLTask
from build_jobs.progress import BuildProgress, Canceled
from build_jobs.report import PlatformReporter, RetryPolicy
from build_jobs.template import Built, job_class
from serval.translation.v1 import platform_pb2
from serval_common import families
from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec
from serval_common.names import check_id
from serval_common.settings import Settings
from serval_common.store import ModelStore, store_from_settings

log = logging.getLogger(__name__)


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
        family = families.family(args.engine_type)
        store = store or store_from_settings(settings, args.store_url)
        job = job_class(family)(args, settings, store, progress)
        if job.reports_quote_conventions:
            _report_quote_conventions(args, store, platform)
        built = job.build()
        published = True
        if built.pretranslated is not None:
            platform.execution_data(args.engine_id, _execution_data(args, built))
        progress.update(1.0, f"published revision {args.revision}{built.summary}")
        platform.completed(corpus_size=built.corpus_size, confidence=built.confidence)
        scores = {k: f"{v:.2f}" for k, v in built.scores.items()}
        log.info("build completed", extra={**extra, **scores, **built.log_extra})
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


def _execution_data(args: JobSpec, built: Built) -> platform_pb2.ExecutionData:
    return platform_pb2.ExecutionData(
        train_count=built.corpus_size,
        pretranslate_count=built.pretranslated or 0,
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
