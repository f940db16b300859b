"""Serval 1.20's key management (`/api/v1/api-keys`): an administrator's tool makes, lists, reads
and revokes API keys over the API, as Serval's `Serval.ApiKeys` does.

A key acts as its `clientId`, which is this service's owner: everything the key creates belongs
to that owner, and it reaches only that owner's entities. These are the `api_keys` rows the
`serval admin api-key` command and `/api/v1/admin/api-keys` make too, so every key shows here.

The four operations need `create:api_keys`, `read:api_keys` and `delete:api_keys`, which only an
administrator holds (`auth.py`): they see and revoke every owner's keys, as Serval's do; an
ordinary key, of any owner and with every other scope, is refused (403) and learns nothing.
Creating checks what Serval checks (a `clientId` and a `name`, at least one scope, each one
grantable, an `expiresAt` in the future) and what the columns hold, each with a short sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import select

from serval_api.auth import (
    CREATE_API_KEYS,
    DELETE_API_KEYS,
    GRANTABLE_SCOPES,
    READ_API_KEYS,
    Caller,
)
from serval_api.db.models import ApiKeyRow, utcnow
from serval_api.errors import InvalidArgument, NotFound
from serval_api.service import keys, limits
from serval_api.service.changes import API_KEYS
from serval_api.service.context import Services

CLIENT_ID_CHARS = limits.column_width(ApiKeyRow, "owner")
NAME_CHARS = limits.column_width(ApiKeyRow, "name")
MAX_SCOPES = 64
"""More scopes than there are (grantable ones are fewer): a list this long is no mistake to read."""
LATEST_EXPIRY = datetime(9999, 1, 1, tzinfo=UTC)


async def create(
    services: Services,
    caller: Caller,
    *,
    client_id: str,
    name: str,
    scopes: Sequence[str],
    expires_at: datetime | None = None,
) -> tuple[ApiKeyRow, str]:
    """A new key for `client_id` and its plaintext, which is never stored and never shown again."""
    caller.require(CREATE_API_KEYS)
    client_id = _required_text("clientId", client_id, CLIENT_ID_CHARS)
    name = _required_text("name", name, NAME_CHARS)
    granted = _grantable(scopes)
    expires_at = _future(expires_at)
    return await keys.create_api_key(services.db, client_id, granted, name=name, expires_at=expires_at)


async def list_keys(services: Services, caller: Caller, client_id: str | None = None) -> list[ApiKeyRow]:
    """Every key, revoked and expired ones too, oldest first; `client_id`: only that owner's."""
    caller.require(READ_API_KEYS)
    query = select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id)
    if client_id is not None:
        if len(client_id) > CLIENT_ID_CHARS or "\x00" in client_id:
            return []  # no key can be this owner's
        query = query.where(ApiKeyRow.owner == client_id)
    async with services.db.session() as s:
        return list((await s.scalars(query)).all())


async def get(services: Services, caller: Caller, key_id: str) -> ApiKeyRow:
    caller.require(READ_API_KEYS)
    async with services.db.session() as s:
        record = await s.get(ApiKeyRow, key_id) if limits.can_be_id(key_id) else None
    if record is None:
        raise NotFound(f"API key {limits.shown(key_id)} not found")
    return record


async def revoke(services: Services, caller: Caller, key_id: str) -> None:
    """The key authenticates nothing from now on, on every replica (the lookups' cache is told);
    its record stays, with `revokedAt`. Revoking a revoked key changes nothing."""
    caller.require(DELETE_API_KEYS)
    async with services.db.session() as s:
        record = await s.get(ApiKeyRow, key_id) if limits.can_be_id(key_id) else None
        if record is None:
            raise NotFound(f"API key {limits.shown(key_id)} not found")
        record.revoked_at = record.revoked_at or utcnow()
    services.changes.notify(API_KEYS)


def _required_text(field: str, value: str, max_chars: int) -> str:
    if not value.strip():
        raise InvalidArgument(f"{field} must not be empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidArgument(f"{field}: control characters are not allowed")
    return limits.text(field, value, max_chars)


def _grantable(scopes: Sequence[str]) -> list[str]:
    if not scopes:
        raise InvalidArgument("scopes: name at least one scope")
    limits.items("scopes", scopes, MAX_SCOPES)
    refused = [s for s in dict.fromkeys(scopes) if s not in GRANTABLE_SCOPES]
    if refused:
        shown = ", ".join(limits.shown(s) for s in refused[:5]) + (", …" if len(refused) > 5 else "")
        raise InvalidArgument(
            f"scopes: {shown} cannot be granted to an API key; grant any of "
            f"{', '.join(sorted(GRANTABLE_SCOPES))}"
        )
    return list(dict.fromkeys(scopes))


def _future(expires_at: datetime | None) -> datetime | None:
    """`expiresAt` in UTC (a time without an offset is UTC, as in Serval); it must be to come."""
    if expires_at is None:
        return None
    try:
        moment = expires_at.replace(tzinfo=UTC) if expires_at.tzinfo is None else expires_at.astimezone(UTC)
    except OverflowError:  # the offset moves it past year 1 or 9999
        raise InvalidArgument("expiresAt: not a date this service can hold") from None
    if moment <= utcnow():
        raise InvalidArgument(f"expiresAt: {moment.isoformat()} is not in the future")
    if moment >= LATEST_EXPIRY:
        raise InvalidArgument(
            "expiresAt: give a date before the year 9999, or none for a key that never expires"
        )
    return moment
