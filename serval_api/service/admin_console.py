"""What an administrator looks at besides the node list (`service.admin`): the builds of every
owner, the engines and API keys counted per family and owner, the webhook outbox's backlog, and
one bounded long poll that answers all of it, the nodes included, once something changed. The web
console (`/admin`, `serval_api/web/`) reads these through the admin REST API; every function needs
the `admin` scope.

The long poll compares a fingerprint of what it would answer, re-read every `OVERVIEW_TICK_S`;
heartbeat times and free memory, which move with every heartbeat, are left out of it (they are
answered all the same), so a quiet fleet does not wake the poll twice a second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select

from serval_api.auth import ADMIN, Caller
from serval_api.db.models import (
    ApiKeyRow,
    BuildRow,
    BuildState,
    DeliveryState,
    EngineRow,
    WebhookDeliveryRow,
    WebhookRow,
    utcnow,
)
from serval_api.errors import Unavailable
from serval_api.service import admin
from serval_api.service.context import Services
from serval_common.aio import wait_changed

RECENT_FAILURES = 20
"""How many faulted builds the console shows, newest first."""
RECENT_FAILURE_DAYS = 7
"""…of those finished within this many days."""
MAX_RUNNING_BUILDS = 500
"""Pending and Active builds listed at most (a queue longer than this is still counted)."""
OVERVIEW_MAX_WAIT_S = 25.0
"""The longest an overview long poll waits for a change before it answers what it has; the
browser then polls again. Below common proxies' 30 s idle timeouts."""
OVERVIEW_TICK_S = 1.0
"""How often a waiting overview poll re-reads the fleet and the database."""
RECENT_BUILDS = 50
"""How many builds of any state the console's build history shows, newest first."""
SERVICE_STOPPING = "the API service is stopping (a restart or a shutdown); try again when it is back"
STOPPING_RETRY_AFTER_S = 2.0


@dataclass(frozen=True)
class BuildView:
    id: str
    engine_id: str
    owner: str
    engine_type: str
    state: str
    revision: int
    progress: float | None
    """0 to 1, as the build job last reported it; None: not reported yet."""
    message: str | None
    queue_depth: int | None
    phase: str | None
    """The stage of the build's last phase (`Train`, `Inference`), if it reported phases."""
    step: int | None
    step_count: int | None
    date_created: datetime
    date_started: datetime | None
    date_finished: datetime | None


@dataclass(frozen=True)
class BuildsView:
    running: list[BuildView]
    """Active builds, oldest first."""
    queued: list[BuildView]
    """Pending builds (waiting for a job slot or for their job to start), oldest first."""
    queue_depth: int
    """Build jobs the job launcher holds waiting for a slot."""
    recent_failures: list[BuildView]
    """Faulted builds of the last `RECENT_FAILURE_DAYS` days, newest first."""
    recent: list[BuildView] = dataclasses.field(default_factory=list)
    """The last `RECENT_BUILDS` builds of every state and owner, newest first (answered, not
    part of the overview's version)."""


@dataclass(frozen=True)
class EngineCount:
    owner: str
    engine_type: str
    count: int


@dataclass(frozen=True)
class ApiKeyCount:
    owner: str
    active: int
    """Neither revoked nor expired."""
    revoked: int
    expired: int
    bound: int
    """Active keys bound to an engine."""


@dataclass(frozen=True)
class WebhookBacklog:
    hooks: int
    """Webhooks registered, of every owner."""
    pending: int
    """Deliveries not yet delivered nor given up."""
    retrying: int
    """…of which at least one attempt failed."""
    failed_recently: int
    """Deliveries given up in the last day."""
    oldest_pending_at: datetime | None


@dataclass(frozen=True)
class SummaryView:
    engines: list[EngineCount]
    api_keys: list[ApiKeyCount]
    webhooks: WebhookBacklog


@dataclass(frozen=True)
class Overview:
    version: str
    """A fingerprint of the rest (heartbeat times and free memory left out): send it back as
    `since` to wait for a change."""
    nodes: list[admin.NodeView]
    builds: BuildsView
    summary: SummaryView
    grpc_port: int
    """The port inference nodes dial (`serval node --api-address HOST:PORT`)."""


async def builds(services: Services, caller: Caller) -> BuildsView:
    caller.require(ADMIN)
    return await _with_history(services, await _builds(services))


async def summary(services: Services, caller: Caller) -> SummaryView:
    caller.require(ADMIN)
    return await _summary(services)


async def overview(services: Services, caller: Caller, since: str | None, wait_s: float) -> Overview:
    """Everything the console shows. With `since` (a `version` answered before), wait up to
    `wait_s` (at most `OVERVIEW_MAX_WAIT_S`) until the answer differs from that one; then, or when
    the wait is over, answer what there is. A wait counts as one of the key's long polls; when
    the service starts to stop it ends at once with `Unavailable` (`SERVICE_STOPPING`), so an
    open console never holds a shutdown."""
    caller.require(ADMIN)
    loop = asyncio.get_running_loop()
    wait = min(max(wait_s, 0.0), OVERVIEW_MAX_WAIT_S, services.long_poll_max_s)
    deadline = loop.time() + wait
    current = await _overview(services, caller)
    if since is None or current.version != since or wait <= 0:
        return await _answered(services, current)
    async with services.quotas.long_poll(caller):
        while True:
            left = deadline - loop.time()
            if left <= 0:
                return await _answered(services, current)
            if await wait_changed(services.stopping, min(OVERVIEW_TICK_S, left)):
                raise Unavailable(SERVICE_STOPPING, retry_after_s=STOPPING_RETRY_AFTER_S)
            current = await _overview(services, caller)
            if current.version != since:
                return await _answered(services, current)


async def _answered(services: Services, current: Overview) -> Overview:
    """`current` with the build history, read once per answer rather than on every tick of a
    wait: a build that ends leaves the running ones, which the version already follows."""
    return dataclasses.replace(current, builds=await _with_history(services, current.builds))


async def _overview(services: Services, caller: Caller) -> Overview:
    nodes = await admin.list_nodes(services, caller)
    running = await _builds(services)
    counts = await _summary(services)
    steady = [dataclasses.replace(n, last_seen=datetime.min, memory_free_bytes=0) for n in nodes]
    version = hashlib.sha256(repr((steady, running, counts)).encode()).hexdigest()[:16]
    return Overview(
        version=version,
        nodes=nodes,
        builds=running,
        summary=counts,
        grpc_port=services.settings.api.grpc_port,
    )


async def _builds(services: Services) -> BuildsView:
    since = utcnow() - timedelta(days=RECENT_FAILURE_DAYS)
    live = (BuildState.PENDING.value, BuildState.ACTIVE.value)
    async with services.db.session() as s:
        unfinished = (
            await s.execute(
                select(BuildRow, EngineRow.type)
                .join(EngineRow, EngineRow.id == BuildRow.engine_id)
                .where(BuildRow.state.in_(live))
                .order_by(BuildRow.date_created, BuildRow.id)
                .limit(MAX_RUNNING_BUILDS)
            )
        ).all()
        faulted = (
            await s.execute(
                select(BuildRow, EngineRow.type)
                .join(EngineRow, EngineRow.id == BuildRow.engine_id)
                .where(BuildRow.state == BuildState.FAULTED.value, BuildRow.date_finished >= since)
                .order_by(BuildRow.date_finished.desc(), BuildRow.id)
                .limit(RECENT_FAILURES)
            )
        ).all()
    views = [build_view(build, kind) for build, kind in unfinished]
    return BuildsView(
        running=[v for v in views if v.state == BuildState.ACTIVE.value],
        queued=[v for v in views if v.state == BuildState.PENDING.value],
        queue_depth=services.launcher.queue_depth(),
        recent_failures=[build_view(build, kind) for build, kind in faulted],
    )


async def _with_history(services: Services, view: BuildsView) -> BuildsView:
    """`view` with the last `RECENT_BUILDS` builds of every state and owner, newest first."""
    async with services.db.session() as s:
        recent = (
            await s.execute(
                select(BuildRow, EngineRow.type)
                .join(EngineRow, EngineRow.id == BuildRow.engine_id)
                .order_by(BuildRow.date_created.desc(), BuildRow.id)
                .limit(RECENT_BUILDS)
            )
        ).all()
    return dataclasses.replace(view, recent=[build_view(build, kind) for build, kind in recent])


def build_view(build: BuildRow, engine_type: str) -> BuildView:
    phase = build.phases[-1] if build.phases else None
    return BuildView(
        id=build.id,
        engine_id=build.engine_id,
        owner=build.owner,
        engine_type=engine_type,
        state=build.state,
        revision=build.revision,
        progress=build.progress,
        message=build.message,
        queue_depth=build.queue_depth,
        phase=None if phase is None else phase.stage,
        step=None if phase is None else phase.step,
        step_count=None if phase is None else phase.step_count,
        date_created=build.date_created,
        date_started=build.date_started,
        date_finished=build.date_finished,
    )


async def _summary(services: Services) -> SummaryView:
    now = utcnow()
    async with services.db.session() as s:
        engines = (
            await s.execute(
                select(EngineRow.owner, EngineRow.type, func.count())
                .group_by(EngineRow.owner, EngineRow.type)
                .order_by(EngineRow.owner, EngineRow.type)
            )
        ).all()
        keys = (
            await s.execute(
                select(ApiKeyRow.owner, ApiKeyRow.revoked_at, ApiKeyRow.expires_at, ApiKeyRow.engine_id)
            )
        ).all()
        hooks = (await s.execute(select(func.count()).select_from(WebhookRow))).scalar_one()
        pending, retrying, oldest = (
            await s.execute(
                select(
                    func.count(),
                    func.count().filter(WebhookDeliveryRow.attempts > 0),
                    func.min(WebhookDeliveryRow.created_at),
                ).where(WebhookDeliveryRow.state == DeliveryState.PENDING.value)
            )
        ).one()
        failed = (
            await s.execute(
                select(func.count()).where(
                    WebhookDeliveryRow.state == DeliveryState.FAILED.value,
                    WebhookDeliveryRow.created_at >= now - timedelta(days=1),
                )
            )
        ).scalar_one()
    per_owner: dict[str, list[int]] = {}
    for owner, revoked_at, expires_at, engine_id in keys:
        counts = per_owner.setdefault(owner, [0, 0, 0, 0])
        if revoked_at is not None:
            counts[1] += 1
        elif expires_at is not None and expires_at <= now:
            counts[2] += 1
        else:
            counts[0] += 1
            counts[3] += engine_id is not None
    return SummaryView(
        engines=[EngineCount(owner, kind, count) for owner, kind, count in engines],
        api_keys=[ApiKeyCount(owner, *counts) for owner, counts in sorted(per_owner.items())],
        webhooks=WebhookBacklog(
            hooks=hooks,
            pending=pending,
            retrying=retrying,
            failed_recently=failed,
            oldest_pending_at=oldest,
        ),
    )
