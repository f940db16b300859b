"""Build state transitions: every write that moves a running build on. A job's report
(`apply_job_change`, which `platform.py` and start-up recovery call), a fault, a client's cancel,
and the job reference a launch returns. Each transition bumps the build's revision, keeps the
engine's `is_building` in step, queues the webhook events and wakes the long polls; a finished
build never moves again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import UPDATE_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, BuildRow, BuildState, EngineRow, EngineType, utcnow
from serval_api.errors import NotFound
from serval_api.service import diagnostics, pretranslations, revisions
from serval_api.service.builds import running_build
from serval_api.service.changes import build_key, engine_key, owner_builds_key
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_api.webhooks.outbox import WEBHOOK_DELIVERIES, enqueue_build_events

log = logging.getLogger(__name__)


async def apply_job_change(
    services: Services, build_id: str, change: Callable[[BuildRow, EngineRow], None]
) -> BuildRow | None:
    """Apply a change a build job reported; returns None (and changes nothing) once the build
    has finished, so a late or repeated report cannot resurrect it."""
    async with services.db.session() as s:
        # Engine before build: the order every writer locks in, so two writers never deadlock.
        engine_id = await s.scalar(select(BuildRow.engine_id).where(BuildRow.id == build_id))
        engine = None if engine_id is None else await s.get(EngineRow, engine_id, with_for_update=True)
        build = await s.get(BuildRow, build_id, with_for_update=True)
        if build is None:
            raise NotFound(f"build {build_id} not found")
        if not build.build_state.is_running:
            log.info(
                "ignoring a report for a finished build",
                extra={"build_id": build_id, "engine_id": build.engine_id, "state": build.state},
            )
            return None
        if engine is None:
            raise NotFound(f"engine {build.engine_id} not found")
        hooked = await _transition(services, s, build, engine, change)
    _announce(services, build, hooked)
    return build


async def fault_build(
    services: Services, build_id: str, message: str, *, discard: bool = True
) -> BuildRow | None:
    """Fault a running build with `message` and discard the model revision it had begun (unless
    not `discard`: nothing was begun, and the store sweep removes any leftovers)."""

    def fault(build: BuildRow, _engine: EngineRow) -> None:
        build.state = BuildState.FAULTED.value
        build.message = message
        build.date_finished = utcnow()
        build.execution_data = diagnostics.with_fault(build.execution_data, message)

    build = await apply_job_change(services, build_id, fault)
    if build is not None and discard:
        await revisions.discard_unfinished(services, build)
    return build


async def cancel_current_build(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> BuildRow | None:
    caller.require(UPDATE_ENGINES)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, lock=True, types=types)
        build = await running_build(s, engine_id, lock=True)
        if build is None:
            return None
        hooked = await _transition(services, s, build, engine, _cancel)
    _announce(services, build, hooked)
    log.info("build canceled by client", extra={"engine_id": engine_id, "build_id": build.id})
    await services.launcher.cancel(build.id)
    await pretranslations.discard(services, build)
    await revisions.discard_unfinished(services, build)
    return build


def _cancel(build: BuildRow, _engine: EngineRow) -> None:
    build.state = BuildState.CANCELED.value
    build.date_finished = utcnow()


async def _transition(
    services: Services,
    s: AsyncSession,
    build: BuildRow,
    engine: EngineRow,
    change: Callable[[BuildRow, EngineRow], None],
) -> int:
    """`change` applied to a running build, locked with its engine in session `s`: the build's
    revision bumped, the engine's `is_building` kept in step, the webhook events queued (how many)."""
    was_started = build.date_started is not None
    change(build, engine)
    build.revision += 1
    engine.is_building = build.build_state.is_running
    return await enqueue_build_events(
        s, build, was_running=True, was_started=was_started, base_url=services.settings.api_base_url
    )


def _announce(services: Services, build: BuildRow, hooked: int) -> None:
    """Wake the long polls on the build, its engine and its owner's builds, and the webhook workers."""
    services.changes.notify(
        build_key(build.id),
        engine_key(build.engine_id),
        owner_builds_key(build.owner),
        *webhook_wakeup(hooked),
    )


async def record_job_ref(services: Services, build_id: str, job_ref: str) -> None:
    """Internal bookkeeping, not part of the build's wire shape, so the revision stays."""
    async with services.db.session() as s:
        await s.execute(update(BuildRow).where(BuildRow.id == build_id).values(job_ref=job_ref))


def webhook_wakeup(deliveries: int) -> tuple[str, ...]:
    """The change key that wakes the webhook delivery workers, when deliveries were enqueued."""
    return (WEBHOOK_DELIVERIES,) if deliveries else ()
