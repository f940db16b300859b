"""`/api/v1/admin/builds`, `/summary` and `/overview`: what the web console shows, for callers
with the `admin` scope: builds of every owner, counts (engines, API keys) and the webhook backlog,
and one long poll for all of it with the nodes.

It stands apart from the credentials (`admin_credentials.py`) and the node controls
(`admin_nodes.py`): it only reads, over `service.admin_console`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from serval_api.rest.admin_nodes import Node, node_dto
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.disconnect import while_connected
from serval_api.rest.protocol import Model
from serval_api.service import admin_console

router = APIRouter(prefix="/api/v1/admin", tags=["Admin"])


class AdminBuild(Model):
    id: str
    engine_id: str
    owner: str
    engine_type: str
    state: str
    revision: int
    progress: float | None = None
    """0 to 1, as the build job last reported it."""
    message: str | None = None
    queue_depth: int | None = None
    phase: str | None = None
    """The stage of the build's last phase: `Train` or `Inference`."""
    step: int | None = None
    step_count: int | None = None
    date_created: datetime
    date_started: datetime | None = None
    date_finished: datetime | None = None


class AdminBuilds(Model):
    running: list[AdminBuild]
    """Active builds of every owner, oldest first."""
    queued: list[AdminBuild]
    """Pending builds of every owner, oldest first."""
    queue_depth: int
    """Build jobs waiting for a job slot."""
    recent_failures: list[AdminBuild]
    """Faulted builds of the last seven days, newest first (at most 20), with their message."""


class EngineCount(Model):
    owner: str
    engine_type: str
    count: int


class ApiKeyCount(Model):
    owner: str
    active: int
    revoked: int
    expired: int
    bound: int
    """Active keys bound to an engine."""


class WebhookBacklog(Model):
    hooks: int
    pending: int
    """Deliveries waiting to be delivered (or retried)."""
    retrying: int
    """Pending deliveries with at least one failed attempt."""
    failed_recently: int
    """Deliveries created in the last day and given up."""
    oldest_pending_at: datetime | None = None


class AdminSummary(Model):
    engines: list[EngineCount]
    """Engines per owner and type (family)."""
    api_keys: list[ApiKeyCount]
    webhooks: WebhookBacklog


class AdminOverview(Model):
    version: str
    """Send it back as `since` to wait for a change."""
    nodes: list[Node]
    builds: AdminBuilds
    summary: AdminSummary
    grpc_port: int
    """The port inference nodes dial."""


Since = Annotated[
    str | None, Query(description="A `version` answered before: wait until the overview differs from it")
]
Wait = Annotated[
    float,
    Query(
        ge=0,
        description=f"Seconds to wait for a change (at most {admin_console.OVERVIEW_MAX_WAIT_S:g}); "
        "then the overview is answered as it is",
    ),
]


@router.get("/builds", response_model=AdminBuilds, response_model_exclude_none=True)
async def list_builds(services: ServicesDep, caller: CallerDep) -> AdminBuilds:
    """Running and queued builds of every owner, the job queue's depth, recent failures."""
    return _builds(await admin_console.builds(services, caller))


@router.get("/summary", response_model=AdminSummary, response_model_exclude_none=True)
async def get_summary(services: ServicesDep, caller: CallerDep) -> AdminSummary:
    """Engines per owner and type, API keys per owner, the webhook outbox's backlog."""
    return _summary(await admin_console.summary(services, caller))


@router.get("/overview", response_model=AdminOverview, response_model_exclude_none=True)
async def get_overview(
    request: Request, services: ServicesDep, caller: CallerDep, since: Since = None, wait: Wait = 0
) -> AdminOverview:
    """Nodes, builds and the summary in one answer (the web console's live view). With `since`,
    a long poll: it answers once anything but heartbeat times and free memory differs, or when
    `wait` is over, with the overview as it is then (never 408)."""
    view = await while_connected(request, admin_console.overview(services, caller, since, wait))
    return AdminOverview(
        version=view.version,
        nodes=[node_dto(n) for n in view.nodes],
        builds=_builds(view.builds),
        summary=_summary(view.summary),
        grpc_port=view.grpc_port,
    )


def _builds(view: admin_console.BuildsView) -> AdminBuilds:
    return AdminBuilds(
        running=[_build(b) for b in view.running],
        queued=[_build(b) for b in view.queued],
        queue_depth=view.queue_depth,
        recent_failures=[_build(b) for b in view.recent_failures],
    )


def _build(view: admin_console.BuildView) -> AdminBuild:
    return AdminBuild.model_validate(view, from_attributes=True)


def _summary(view: admin_console.SummaryView) -> AdminSummary:
    return AdminSummary.model_validate(view, from_attributes=True)
