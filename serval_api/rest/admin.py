"""`/api/v1/admin/…`: API keys, node tokens and nodes, for callers with the `admin` scope."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, status

from serval_api.db.models import ApiKey as ApiKeyRow
from serval_api.db.models import Node as NodeRow
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


class Node(Model):
    id: str
    status: str
    device: str
    free_slots: int
    last_seen: datetime
    software_version: str | None = None
    api_instance_id: str | None = None


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


def _node(row: NodeRow) -> Node:
    return Node(
        id=row.id,
        status=row.status,
        device=row.device,
        free_slots=row.free_slots,
        last_seen=row.last_seen,
        software_version=row.software_version,
        api_instance_id=row.api_instance_id,
    )
