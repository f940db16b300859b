"""`/api/v1/admin/…`: API keys, node tokens and nodes (listing and control), and what the web
console shows (builds of every owner, counts, the webhook backlog, one long poll for all of it),
for callers with the `admin` scope."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from serval_api.auth import KeyLimits
from serval_api.db.models import ApiKey as ApiKeyRow
from serval_api.db.models import NodeToken as NodeTokenRow
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.disconnect import while_connected
from serval_api.rest.protocol import Model
from serval_api.service import admin, admin_console

router = APIRouter(prefix="/api/v1/admin", tags=["Admin"])


class ApiKeyLimits(Model):
    """One key's overrides of the per-key limits (docs/limits.md); a field left out: the setting,
    0: no limit for this key."""

    translate_per_minute: int | None = None
    build_starts_per_hour: int | None = None
    concurrent_long_polls: int | None = None
    max_chars_per_request: int | None = None
    """The longest segment or text one request may send (in place of `api.max_segment_chars` and
    `api.max_text_chars`)."""

    def overrides(self) -> KeyLimits:
        return KeyLimits(
            translate_per_minute=self.translate_per_minute,
            build_starts_per_hour=self.build_starts_per_hour,
            concurrent_long_polls=self.concurrent_long_polls,
            max_chars_per_request=self.max_chars_per_request,
        )


class AdminApiKeyConfig(Model):
    owner: str
    scopes: list[str]
    engine_id: str | None = None
    """Bind the key to one of the owner's translation engines: the SIL Converters and LibreTranslate
    dialects, whose clients name no engine, translate with it. None: with the public base model."""
    limits: ApiKeyLimits | None = None
    """The key's own per-key limits in place of the settings."""


class AdminApiKey(Model):
    id: str
    owner: str
    name: str | None = None
    scopes: list[str]
    prefix: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    engine_id: str | None = None
    limits: ApiKeyLimits | None = None
    key: str | None = None


class NodeTokenConfig(Model):
    name: str = "default"


class NodeToken(Model):
    id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None = None
    token: str | None = None


class NodeModel(Model):
    engine_id: str
    revision: int
    state: str
    message: str = ""
    size_bytes: int = 0
    """The loaded model's size: the same for every revision sharing its weights."""
    weights: str = ""
    """The weights identity the revision serves: revisions with the same one share one loaded model."""
    trained_through: int | None = None
    """smt-transfer: the number of the engine's trained segment the READY model has learned up to
    (every segment up to it is in the model)."""


class Node(Model):
    id: str
    status: str
    device: str
    free_slots: int
    last_seen: datetime
    slots: int = 0
    in_flight: int = 0
    memory_total_bytes: int = 0
    memory_free_bytes: int = 0
    drained: bool = False
    drain_reason: str | None = None
    models: list[NodeModel] = []
    loaded_models: int = 0
    """Sets of weights held (or loading): revisions sharing weights count once."""
    memory_held_bytes: int = 0
    """Memory of the models held, each set of weights counted once."""
    software_version: str | None = None
    api_instance_id: str | None = None
    token_id: str | None = None


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


class NodeDrainConfig(Model):
    reason: str = ""


class NodeEngineConfig(Model):
    engine_id: str
    revision: int | None = None


@router.post(
    "/api-keys",
    status_code=status.HTTP_201_CREATED,
    response_model=AdminApiKey,
    response_model_exclude_none=True,
)
async def create_api_key(config: AdminApiKeyConfig, services: ServicesDep, caller: CallerDep) -> AdminApiKey:
    record, plaintext = await admin.create_api_key(
        services,
        caller,
        config.owner,
        config.scopes,
        config.engine_id,
        config.limits.overrides() if config.limits is not None else None,
    )
    return _api_key(record, plaintext)


@router.get("/api-keys", response_model=list[AdminApiKey], response_model_exclude_none=True)
async def list_api_keys(
    services: ServicesDep, caller: CallerDep, owner: str | None = None
) -> list[AdminApiKey]:
    return [_api_key(k) for k in await admin.list_api_keys(services, caller, owner)]


@router.put("/api-keys/{key_id}/limits", response_model=AdminApiKey, response_model_exclude_none=True)
async def set_api_key_limits(
    key_id: str, config: ApiKeyLimits, services: ServicesDep, caller: CallerDep
) -> AdminApiKey:
    """Replace the key's limit overrides (`{}`: the settings again)."""
    return _api_key(await admin.set_api_key_limits(services, caller, key_id, config.overrides()))


@router.delete("/api-keys/{key_id}", status_code=status.HTTP_200_OK)
async def revoke_api_key(key_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await admin.revoke_api_key(services, caller, key_id)


@router.post(
    "/node-tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=NodeToken,
    response_model_exclude_none=True,
)
async def create_node_token(config: NodeTokenConfig, services: ServicesDep, caller: CallerDep) -> NodeToken:
    record, plaintext = await admin.create_node_token(services, caller, config.name)
    return _node_token(record, plaintext)


@router.get("/node-tokens", response_model=list[NodeToken], response_model_exclude_none=True)
async def list_node_tokens(services: ServicesDep, caller: CallerDep) -> list[NodeToken]:
    return [_node_token(t) for t in await admin.list_node_tokens(services, caller)]


@router.delete("/node-tokens/{token_id}", status_code=status.HTTP_200_OK)
async def revoke_node_token(token_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await admin.revoke_node_token(services, caller, token_id)


@router.get("/nodes", response_model=list[Node], response_model_exclude_none=True)
async def list_nodes(services: ServicesDep, caller: CallerDep) -> list[Node]:
    return [_node(n) for n in await admin.list_nodes(services, caller)]


@router.get("/nodes/{node_id}", response_model=Node, response_model_exclude_none=True)
async def get_node(node_id: str, services: ServicesDep, caller: CallerDep) -> Node:
    return _node(await admin.get_node(services, caller, node_id))


@router.post("/nodes/{node_id}/drain", response_model=Node, response_model_exclude_none=True)
async def drain_node(
    node_id: str, services: ServicesDep, caller: CallerDep, config: NodeDrainConfig | None = None
) -> Node:
    reason = config.reason if config is not None else ""
    return _node(await admin.drain_node(services, caller, node_id, reason))


@router.post("/nodes/{node_id}/undrain", response_model=Node, response_model_exclude_none=True)
async def undrain_node(node_id: str, services: ServicesDep, caller: CallerDep) -> Node:
    return _node(await admin.undrain_node(services, caller, node_id))


@router.post(
    "/nodes/{node_id}/models",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Node,
    response_model_exclude_none=True,
)
async def load_engine(
    node_id: str, config: NodeEngineConfig, services: ServicesDep, caller: CallerDep
) -> Node:
    """Pre-warm: the node starts loading the engine's revision; poll the node to see it ready."""
    return _node(await admin.load_engine(services, caller, node_id, config.engine_id, config.revision))


@router.delete("/nodes/{node_id}/models/{engine_id}", response_model=Node, response_model_exclude_none=True)
async def unload_engine(node_id: str, engine_id: str, services: ServicesDep, caller: CallerDep) -> Node:
    return _node(await admin.unload_engine(services, caller, node_id, engine_id))


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
        nodes=[_node(n) for n in view.nodes],
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


def _api_key(row: ApiKeyRow, plaintext: str | None = None) -> AdminApiKey:
    return AdminApiKey(
        id=row.id,
        owner=row.owner,
        name=row.name,
        scopes=list(row.scopes),
        prefix=row.prefix,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        engine_id=row.engine_id,
        limits=ApiKeyLimits(**stored) if (stored := KeyLimits.of(row.limits).stored()) else None,
        key=plaintext,
    )


def _node_token(row: NodeTokenRow, plaintext: str | None = None) -> NodeToken:
    return NodeToken(
        id=row.id, name=row.name, created_at=row.created_at, revoked_at=row.revoked_at, token=plaintext
    )


def _node(view: admin.NodeView) -> Node:
    return Node(
        id=view.id,
        status=view.status,
        device=view.device,
        free_slots=view.free_slots,
        last_seen=view.last_seen,
        slots=view.slots,
        in_flight=view.in_flight,
        memory_total_bytes=view.memory_total_bytes,
        memory_free_bytes=view.memory_free_bytes,
        drained=view.drained,
        drain_reason=view.drain_reason,
        models=[
            NodeModel(
                engine_id=m.engine_id,
                revision=m.revision,
                state=m.state,
                message=m.message,
                size_bytes=m.size_bytes,
                weights=m.weights,
                trained_through=m.trained_through,
            )
            for m in view.models
        ],
        loaded_models=view.loaded_models,
        memory_held_bytes=view.memory_held_bytes,
        software_version=view.software_version,
        api_instance_id=view.api_instance_id,
        token_id=view.token_id,
    )
