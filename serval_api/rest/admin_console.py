"""`/api/v1/admin/builds`, `/summary`, `/engines`, `/base-models` and `/overview`: what the web
console shows, for callers with the `admin` scope: builds of every owner (running, queued, failed,
and the recent history), counts (engines, API keys), the webhook backlog, every engine with its
last build and the keys bound to it, the published base models with their languages, and one
long poll for the nodes, builds and counts.

It stands apart from the credentials (`admin_credentials.py`) and the node controls
(`admin_nodes.py`): it only reads, over `service.admin_console`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from serval_api.rest.admin_nodes import Node, node_dtos
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.disconnect import while_connected
from serval_api.rest.protocol import Model
from serval_api.service import admin_console, admin_engines

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
    recent: list[AdminBuild] = []
    """The last 50 builds of every state and owner, newest first: the build history."""


class BoundKey(Model):
    id: str
    prefix: str
    """The start of the key, as `serval admin api-key list` shows it."""
    owner: str
    name: str | None = None


class AdminEngine(Model):
    id: str
    owner: str
    name: str | None = None
    engine_type: str
    """The engine's family: `nmt`, `smt-transfer`, `echo`, …"""
    source_language: str
    target_language: str
    model_revision: int
    """The revision translations use; 0: never built."""
    is_building: bool
    date_created: datetime
    last_build: AdminBuild | None = None
    bound_keys: list[BoundKey] = []
    """Active API keys bound to the engine: SIL Converters and LibreTranslate clients using them
    translate with it."""


class AdminBaseModel(Model):
    name: str
    languages: list[str]
    """The NLLB (FLORES-200) codes the model knows."""
    languages_text: str
    """The same in words: "all 202 NLLB-200 languages", "eng_Latn and swh_Latn", …"""
    all_nllb_languages: bool
    size_bytes: int
    quantization: str | None = None
    created_at: datetime
    is_default: bool
    """Fine-tunes start from it when a build names no base model (`jobs.default_base_model`)."""
    is_public: bool
    """Keys bound to no engine translate with it (SIL Converters, LibreTranslate)."""


class BaseModelProblem(Model):
    name: str
    problem: str


class AdminBaseModels(Model):
    base_models: list[AdminBaseModel]
    problems: list[BaseModelProblem] = []
    """Folders under `base-models/` whose manifest cannot be read (not usable by builds)."""


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


@router.get("/engines", response_model=list[AdminEngine], response_model_exclude_none=True)
async def list_engines(services: ServicesDep, caller: CallerDep) -> list[AdminEngine]:
    """Every owner's engines, newest first (at most 500): family, languages, current revision,
    last build, and the active API keys bound to each."""
    return [
        AdminEngine(
            id=e.id,
            owner=e.owner,
            name=e.name,
            engine_type=e.engine_type,
            source_language=e.source_language,
            target_language=e.target_language,
            model_revision=e.model_revision,
            is_building=e.is_building,
            date_created=e.date_created,
            last_build=_build(e.last_build) if e.last_build is not None else None,
            bound_keys=[BoundKey.model_validate(k, from_attributes=True) for k in e.bound_keys],
        )
        for e in await admin_engines.list_engines(services, caller)
    ]


@router.get("/base-models", response_model=AdminBaseModels, response_model_exclude_none=True)
async def list_base_models(services: ServicesDep, caller: CallerDep) -> AdminBaseModels:
    """The base models published in the model store, with the languages each knows."""
    found, problems = await admin_engines.list_base_models(services, caller)
    return AdminBaseModels(
        base_models=[AdminBaseModel.model_validate(m, from_attributes=True) for m in found],
        problems=[BaseModelProblem.model_validate(p, from_attributes=True) for p in problems],
    )


@router.get("/overview", response_model=AdminOverview, response_model_exclude_none=True)
async def get_overview(
    request: Request, services: ServicesDep, caller: CallerDep, since: Since = None, wait: Wait = 0
) -> AdminOverview:
    """Nodes, builds and the summary in one answer (the web console's live view). With `since`,
    a long poll: it answers once anything but heartbeat times and free memory differs, or when
    `wait` is over, with the overview as it is then (never 408). When the service starts to stop,
    a waiting poll answers 503 at once (with `Retry-After`)."""
    view = await while_connected(request, admin_console.overview(services, caller, since, wait))
    return AdminOverview(
        version=view.version,
        nodes=await node_dtos(services, view.nodes),
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
        recent=[_build(b) for b in view.recent],
    )


def _build(view: admin_console.BuildView) -> AdminBuild:
    return AdminBuild.model_validate(view, from_attributes=True)


def _summary(view: admin_console.SummaryView) -> AdminSummary:
    return AdminSummary.model_validate(view, from_attributes=True)
