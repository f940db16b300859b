"""Builds as clients read them: one build, an engine's list, its current build, each long-polled
for a revision, and the stream `WatchBuild` sends. Starting a build is `build_start.py`; every
change of a build's state (a job's report, a fault, a client's cancel) is `build_transitions.py`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, BuildRow, BuildState, EngineType
from serval_api.errors import NotFound
from serval_api.service import limits
from serval_api.service.changes import build_key, engine_key
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_api.service.long_poll import wait_until
from serval_common.aio import wait_changed

_RUNNING_STATES = (BuildState.PENDING.value, BuildState.ACTIVE.value)


async def get_build(
    services: Services,
    caller: Caller,
    engine_id: str,
    build_id: str,
    *,
    min_revision: int | None = None,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> BuildRow:
    caller.require(READ_ENGINES)

    async def read() -> BuildRow:
        async with services.db.session() as s:
            await owned_engine(s, caller, engine_id, types=types)
            build = await s.get(BuildRow, build_id) if limits.can_be_id(build_id) else None
            if build is None or build.engine_id != engine_id:
                raise NotFound(f"build {limits.shown(build_id)} not found")
            return build

    return await wait_until(
        services,
        build_key(build_id),
        read,
        lambda b: min_revision is None or b.revision >= min_revision,
        caller=caller,
    )


async def list_builds(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> list[BuildRow]:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id, types=types)
        query = (
            select(BuildRow)
            .where(BuildRow.engine_id == engine_id)
            .order_by(BuildRow.date_created, BuildRow.id)
        )
        return list((await s.scalars(query)).all())


async def current_build(
    services: Services,
    caller: Caller,
    engine_id: str,
    *,
    min_revision: int | None = None,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> BuildRow | None:
    """The Pending/Active build, or None. With `min_revision`, the engine's latest build counts
    too once it has reached that revision, so a poller sees the outcome of a build that finished
    before (or while) it polled instead of a bare 204."""
    caller.require(READ_ENGINES)

    async def read() -> BuildRow | None:
        async with services.db.session() as s:
            await owned_engine(s, caller, engine_id, types=types)
            build = await running_build(s, engine_id)
            if build is None and min_revision is not None:
                latest = await _latest_build(s, engine_id)
                if latest is not None and latest.revision >= min_revision:
                    build = latest
        return build

    return await wait_until(
        services,
        engine_key(engine_id),
        read,
        lambda b: b is None or min_revision is None or b.revision >= min_revision,
        caller=caller,
    )


async def running_build(s: AsyncSession, engine_id: str, *, lock: bool = False) -> BuildRow | None:
    """The engine's Pending or Active build (at most one), locked for update when `lock`."""
    query = select(BuildRow).where(BuildRow.engine_id == engine_id, BuildRow.state.in_(_RUNNING_STATES))
    return (await s.scalars(query.with_for_update() if lock else query)).first()


async def _latest_build(s: AsyncSession, engine_id: str) -> BuildRow | None:
    query = (
        select(BuildRow)
        .where(BuildRow.engine_id == engine_id)
        .order_by(BuildRow.date_created.desc(), BuildRow.id.desc())
    )
    return (await s.scalars(query.limit(1))).first()


async def watch_build(
    services: Services, caller: Caller, engine_id: str, build_id: str | None = None, *, min_revision: int = 0
) -> AsyncGenerator[tuple[BuildRow, int], None]:
    """Yield `(build, engine model revision)` once per build revision ≥ `min_revision`, ending
    after the build reaches a final state. No `build_id` follows the engine's current build.
    Nothing is registered for wake-ups until a read found the build the caller's, and no wake-up
    is held while the caller reads an update."""
    caller.require(READ_ENGINES)

    async def read(followed: str | None) -> tuple[BuildRow, int]:
        async with services.db.session() as s:
            if followed is None:
                build = await running_build(s, engine_id)
            else:
                build = await s.get(BuildRow, followed) if limits.can_be_id(followed) else None
            # The engine after the build: under READ COMMITTED each statement sees what was committed
            # before it began, so a completed build is never paired with the revision before it.
            engine = await owned_engine(s, caller, engine_id)
        if build is None or build.engine_id != engine_id:
            what = (
                f"build {limits.shown(followed)}"
                if followed
                else f"a build pending or running on engine {engine_id}"
            )
            raise NotFound(f"{what} not found")
        return build, engine.model_revision

    build, model_revision = await read(build_id)
    last_sent: int | None = None
    if build.revision >= min_revision:
        last_sent = build.revision
        yield build, model_revision
    if not build.build_state.is_running:
        return
    # A stream that waits counts against the caller's concurrent long polls until it ends.
    async with services.quotas.long_poll(caller):
        while True:
            if build.revision >= min_revision and build.revision != last_sent:
                last_sent = build.revision
                yield build, model_revision
            if not build.build_state.is_running:
                return
            seen = build.revision
            with services.changes.watch(build_key(build.id)) as changed:
                build, model_revision = await read(build.id)
                if build.revision == seen:
                    await wait_changed(changed, services.long_poll_max_s)
