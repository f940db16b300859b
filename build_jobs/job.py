"""One build job, start to finish, reported through the platform RPCs."""

from __future__ import annotations

import logging

from build_jobs.options import BuildOptions
from build_jobs.publish import publish_inference_only
from build_jobs.report import PlatformReporter
from serval_common.jobs import JobSpec
from serval_common.settings import Settings
from serval_common.store import store_from_settings

log = logging.getLogger(__name__)


def run_job(args: JobSpec, settings: Settings) -> int:
    """Run the build; every failure is reported as BuildFaulted with a message a user can act on."""
    reporter = PlatformReporter(args.api_address, args.build_id, args.job_token)
    extra = {"build_id": args.build_id, "engine_id": args.engine_id}
    try:
        reporter.started()
        options = BuildOptions.parse(args.options_json)
        if args.train:
            raise NotImplementedError(
                "training builds are not available yet; start a build with empty trainOn"
            )
        base_model = options.base_model or settings.jobs.default_base_model
        store = store_from_settings(settings, args.store_url)
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
    except Exception as exc:
        log.exception("build failed", extra=extra)
        reporter.faulted(str(exc) or type(exc).__name__)
        return 1
    finally:
        reporter.close()
