"""`/api/v1/admin/…`: API keys, node tokens and nodes (listing and control), for callers with the
`admin` scope."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, status

from serval_api.db.models import ApiKey as ApiKeyRow
from serval_api.db.models import NodeToken as NodeTokenRow
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.protocol import Model
from serval_api.service import admin

router = APIRouter(prefix="/api/v1/admin", tags=["Admin"])


class ApiKeyConfig(Model):
    owner: str
    scopes: list[str]


class ApiKey(Model):
    id: str
    owner: str
    scopes: list[str]
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None
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
    software_version: str | None = None
    api_instance_id: str | None = None
    token_id: str | None = None


class NodeDrainConfig(Model):
    reason: str = ""


class NodeEngineConfig(Model):
    engine_id: str
    revision: int | None = None


@router.post(
    "/api-keys", status_code=status.HTTP_201_CREATED, response_model=ApiKey, response_model_exclude_none=True
)
async def create_api_key(config: ApiKeyConfig, services: ServicesDep, caller: CallerDep) -> ApiKey:
    record, plaintext = await admin.create_api_key(services, caller, config.owner, config.scopes)
    return _api_key(record, plaintext)


@router.get("/api-keys", response_model=list[ApiKey], response_model_exclude_none=True)
async def list_api_keys(services: ServicesDep, caller: CallerDep, owner: str | None = None) -> list[ApiKey]:
    return [_api_key(k) for k in await admin.list_api_keys(services, caller, owner)]


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


def _api_key(row: ApiKeyRow, plaintext: str | None = None) -> ApiKey:
    return ApiKey(
        id=row.id,
        owner=row.owner,
        scopes=list(row.scopes),
        prefix=row.prefix,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
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
            )
            for m in view.models
        ],
        software_version=view.software_version,
        api_instance_id=view.api_instance_id,
        token_id=view.token_id,
    )
