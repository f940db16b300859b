"""API keys (clients) and node tokens (inference nodes). Only sha256 hashes are stored."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select

from serval_api.auth import API_KEY_SCOPES, KEY_LIMIT_FIELDS, KNOWN_SCOPES, Caller, KeyLimits
from serval_api.db.database import Database
from serval_api.db.models import ApiKeyRow, EngineRow, EngineType, NodeTokenRow, utcnow
from serval_api.errors import InvalidArgument, NotFound
from serval_api.service import limits

API_KEY_PREFIX = "serval_"
NODE_TOKEN_PREFIX = "node_"


def hash_secret(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def new_id() -> str:
    """24 hex characters, the shape of Serval's ObjectIds."""
    return secrets.token_hex(12)


async def create_api_key(
    db: Database,
    owner: str,
    scopes: Iterable[str],
    *,
    name: str | None = None,
    expires_at: datetime | None = None,
    engine_id: str | None = None,
    overrides: KeyLimits | None = None,
) -> tuple[ApiKeyRow, str]:
    """The plaintext is returned once and never stored. A key past `expires_at` authenticates
    nothing. `engine_id` binds the key to an engine (the caller checks it is the owner's);
    `overrides` replaces the per-key limits' settings for it."""
    if not owner.strip():
        raise InvalidArgument("owner must not be empty")
    scopes = list(scopes)
    unknown = sorted(set(scopes) - KNOWN_SCOPES)
    if unknown:
        shown = ", ".join(limits.shown(s) for s in unknown[:5])
        raise InvalidArgument(f"unknown scope {shown}; use any of {', '.join(sorted(KNOWN_SCOPES))}")
    plaintext = API_KEY_PREFIX + secrets.token_urlsafe(32)
    record = ApiKeyRow(
        id=new_id(),
        owner=owner,
        name=name,
        scopes=sorted(set(scopes)),
        key_hash=hash_secret(plaintext),
        prefix=plaintext[: len(API_KEY_PREFIX) + 6],
        created_at=utcnow(),
        expires_at=expires_at,
        engine_id=engine_id,
        limits=overrides.stored() if overrides is not None else None,
    )
    async with db.session() as s:
        s.add(record)
    return record, plaintext


def check_limits(overrides: KeyLimits) -> None:
    """Overrides are 0 or more (0 lifts the limit), characters per request at least 1."""
    for name in KEY_LIMIT_FIELDS:
        value = getattr(overrides, name)
        if value is None:
            continue
        least = 1 if name == "max_chars_per_request" else 0
        if value < least or value > MAX_LIMIT:
            raise InvalidArgument(f"limits.{name}: {least} to {MAX_LIMIT}")


MAX_LIMIT = 2**31 - 1


async def set_api_key_limits(db: Database, key_id: str, overrides: KeyLimits) -> ApiKeyRow:
    """Replace the key's overrides (an empty `KeyLimits`: the settings again)."""
    check_limits(overrides)
    async with db.session() as s:
        record = await s.get(ApiKeyRow, key_id) if limits.can_be_id(key_id) else None
        if record is None:
            raise NotFound(f"API key {limits.shown(key_id)} not found")
        record.limits = overrides.stored()
    return record


async def check_bindable_engine(db: Database, owner: str, engine_id: str) -> None:
    """A key may be bound only to a translation engine of its own owner (`NotFound` otherwise, so
    no one learns another owner's engine ids)."""
    engine = None
    if limits.can_be_id(engine_id):
        async with db.session() as s:
            engine = await s.get(EngineRow, engine_id)
    if engine is None or engine.owner != owner:
        raise NotFound(f"engine {limits.shown(engine_id)} not found among {limits.shown(owner)}'s engines")
    if EngineType(engine.type).is_word_alignment:
        raise InvalidArgument(
            f"engine {engine_id} is a word-alignment engine; bind a key to a translation engine"
        )


async def list_api_keys(db: Database, owner: str | None = None) -> list[ApiKeyRow]:
    query = select(ApiKeyRow).order_by(ApiKeyRow.created_at)
    if owner is not None:
        query = query.where(ApiKeyRow.owner == owner)
    async with db.session() as s:
        return list((await s.scalars(query)).all())


async def revoke_api_key(db: Database, key_id: str) -> None:
    async with db.session() as s:
        record = await s.get(ApiKeyRow, key_id)
        if record is None:
            raise NotFound(f"API key {key_id} not found")
        record.revoked_at = record.revoked_at or utcnow()


async def authenticate_api_key(db: Database, plaintext: str) -> Caller | None:
    """The key's caller; None for a key that is unknown, revoked or expired. Key management's
    scopes never come with a key, whatever its record holds (as in Serval): only `admin` grants
    them to a key."""
    async with db.session() as s:
        record = await s.scalar(select(ApiKeyRow).where(ApiKeyRow.key_hash == hash_secret(plaintext)))
    if record is None or record.revoked_at is not None or expired(record.expires_at):
        return None
    scopes = frozenset(record.scopes) - API_KEY_SCOPES
    return Caller(
        owner=record.owner,
        scopes=scopes,
        expires_at=record.expires_at,
        engine_id=record.engine_id,
        key_id=record.id,
        limits=KeyLimits.of(record.limits),
    )


def expired(expires_at: datetime | None, now: datetime | None = None) -> bool:
    return expires_at is not None and expires_at <= (now or utcnow())


async def create_node_token(db: Database, name: str) -> tuple[NodeTokenRow, str]:
    """The plaintext is returned once and never stored."""
    plaintext = NODE_TOKEN_PREFIX + secrets.token_urlsafe(32)
    record = NodeTokenRow(id=new_id(), name=name, token_hash=hash_secret(plaintext), created_at=utcnow())
    async with db.session() as s:
        s.add(record)
    return record, plaintext


async def list_node_tokens(db: Database) -> list[NodeTokenRow]:
    async with db.session() as s:
        return list((await s.scalars(select(NodeTokenRow).order_by(NodeTokenRow.created_at))).all())


async def revoke_node_token(db: Database, token_id: str) -> None:
    async with db.session() as s:
        record = await s.get(NodeTokenRow, token_id)
        if record is None:
            raise NotFound(f"node token {token_id} not found")
        record.revoked_at = record.revoked_at or utcnow()


async def verify_node_token(db: Database, plaintext: str) -> str | None:
    """The token's id, or None when it is unknown or revoked."""
    if not plaintext:
        return None
    async with db.session() as s:
        record = await s.scalar(select(NodeTokenRow).where(NodeTokenRow.token_hash == hash_secret(plaintext)))
    return record.id if record is not None and record.revoked_at is None else None
