"""`/api/v1/api-keys`: Serval 1.20's key management (`ApiKeysController`), for administrators
(`service/api_keys.py`). The plaintext key is in the create answer only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from pydantic import Field

from serval_api.db.models import ApiKeyRow
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.wire import Model
from serval_api.service import api_keys
from serval_api.urls import api_key_url

router = APIRouter(prefix="/api/v1/api-keys", tags=["API Keys"])


class ApiKeyConfig(Model):
    client_id: str = Field(description="The owner the key acts as: what it creates is theirs.")
    name: str = Field(description="What the key is for.")
    scopes: list[str] = Field(description="At least one; key management's own cannot be granted.")
    expires_at: datetime | None = Field(
        default=None, description="When the key stops working; without an offset, UTC. Omitted: never."
    )


class ApiKey(Model):
    id: str
    url: str
    client_id: str
    name: str
    scopes: list[str]
    expires_at: datetime | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class ApiKeyCreated(ApiKey):
    key: str = Field(description="The key itself: shown here once, never stored.")


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=ApiKeyCreated, response_model_exclude_none=True
)
async def create_api_key(
    config: ApiKeyConfig, services: ServicesDep, caller: CallerDep, response: Response
) -> ApiKeyCreated:
    record, plaintext = await api_keys.create(
        services,
        caller,
        client_id=config.client_id,
        name=config.name,
        scopes=config.scopes,
        expires_at=config.expires_at,
    )
    dto = ApiKeyCreated(**api_key_dto(services.settings.api_base_url, record).model_dump(), key=plaintext)
    response.headers["Location"] = dto.url
    return dto


@router.get("", response_model=list[ApiKey], response_model_exclude_none=True)
async def list_api_keys(
    services: ServicesDep,
    caller: CallerDep,
    client_id: Annotated[str | None, Query(alias="clientId")] = None,
) -> list[ApiKey]:
    base = services.settings.api_base_url
    return [api_key_dto(base, k) for k in await api_keys.list_keys(services, caller, client_id)]


@router.get("/{key_id}", response_model=ApiKey, response_model_exclude_none=True)
async def get_api_key(key_id: str, services: ServicesDep, caller: CallerDep) -> ApiKey:
    return api_key_dto(services.settings.api_base_url, await api_keys.get(services, caller, key_id))


@router.delete("/{key_id}", status_code=status.HTTP_200_OK)
async def revoke_api_key(key_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await api_keys.revoke(services, caller, key_id)


def api_key_dto(base_url: str, record: ApiKeyRow) -> ApiKey:
    """A key made before keys had names reads its visible prefix as its name."""
    return ApiKey(
        id=record.id,
        url=api_key_url(base_url, record.id),
        client_id=record.owner,
        name=record.name or record.prefix,
        scopes=[str(s) for s in record.scopes],
        expires_at=record.expires_at,
        created_at=record.created_at,
        revoked_at=record.revoked_at,
    )
