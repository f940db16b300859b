"""`/api/v1/admin/api-keys` and `/api/v1/admin/node-tokens`: the credentials an admin issues,
lists and revokes: API keys (with an owner, scopes, an optional engine binding and per-key limits)
for clients, node tokens for inference nodes. For callers with the `admin` scope.

It stands apart from the node controls (`admin_nodes.py`) and the web console's views
(`admin_console.py`): it manages who may call, not what runs.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, status

from serval_api.auth import KeyLimits
from serval_api.db.models import ApiKeyRow, NodeTokenRow
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.protocol import Model
from serval_api.service import admin

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
