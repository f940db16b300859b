"""Start-up recovery: builds an earlier run of this API replica left Pending or Active.

A job the launcher can follow again (a ClearML task still running) is resumed. A local job died
with the API service (see `serval_common.jobs.die_with_parent`), so its build is restarted with a new job
token and a new revision number (whatever the dead job wrote under the old one is removed) —
Serval's Restarting → Pending — at most `MAX_RESTARTS` times, then faulted; so is an echo build
(its task died with the service). Local and echo builds of other replicas (another `job_ref`) are
theirs to recover and are left alone.
"""

from __future__ import annotations

import logging
import secrets

from sqlalchemy import select

from serval_api.db.models import BuildRow, BuildState, EngineRow, utcnow
from serval_api.service import diagnostics, pretranslations, revisions
from serval_api.service.build_start import job_spec
from serval_api.service.build_transitions import apply_job_change, record_job_ref
from serval_api.service.context import Services
from serval_api.service.keys import hash_secret
from serval_api.service.launcher import REPLICA_BOUND_REFS

log = logging.getLogger(__name__)

MAX_RESTARTS = 2


async def recover_builds(services: Services) -> None:
    instance = services.settings.api_instance_name
    async with services.db.session() as s:
        running = select(BuildRow.id, BuildRow.job_ref).where(
            BuildRow.state.in_((BuildState.PENDING.value, BuildState.ACTIVE.value))
        )
        found = [(row[0], row[1]) for row in await s.execute(running)]
    for build_id, job_ref in found:
        extra = {"build_id": build_id, "job_ref": job_ref}
        kind, _, owner = (job_ref or "").partition(":")
        if kind in REPLICA_BOUND_REFS and owner != instance:
            continue
        if job_ref is not None and await services.launcher.resume(build_id, job_ref):
            log.info("following the build job again", extra=extra)
            continue
        try:
            await _restart(services, build_id)
        except Exception:
            log.exception("could not restart the build", extra=extra)


async def _restart(services: Services, build_id: str) -> None:
    token = secrets.token_urlsafe(32)
    restarted: list[BuildRow] = []
    abandoned: list[int] = []

    def restart(build: BuildRow, engine: EngineRow) -> None:
        abandoned.append(build.target_model_revision)
        build.restarts += 1
        if build.restarts > MAX_RESTARTS:
            build.state = BuildState.FAULTED.value
            build.message = (
                f"the build job was interrupted {build.restarts} times by API service restarts; "
                "start the build again"
            )
            build.date_finished = utcnow()
            build.execution_data = diagnostics.with_fault(build.execution_data, build.message)
            return
        build.state = BuildState.PENDING.value
        build.message = "restarting: the API service restarted while the build job ran"
        build.step, build.progress, build.phases, build.queue_depth = 0, 0.0, None, None
        build.job_token_hash = hash_secret(token)
        build.target_model_revision = revisions.take_revision(engine)
        restarted.append(build)

    build = await apply_job_change(services, build_id, restart)
    if build is None:
        return
    await pretranslations.discard(services, build)
    await revisions.discard(services, build.engine_id, abandoned[0], build.id)
    if not restarted:
        log.warning("build faulted after repeated restarts", extra={"build_id": build_id})
        return
    async with services.db.session() as s:
        engine = await s.get(EngineRow, build.engine_id)
    if engine is None:
        return
    data = build.execution_data
    train = data is not None and bool(data.train_count or data.train_segment_count)
    spec = job_spec(services, build, engine, train=train, job_token=token)
    log.info("restarting the build job", extra={"build_id": build_id, "engine_id": engine.id})
    await record_job_ref(services, build_id, await services.launcher.launch(spec))
