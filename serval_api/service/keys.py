"""API keys (clients) and node tokens (inference nodes). Only sha256 hashes are stored."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from sqlalchemy import select

from serval_api.auth import Caller
from serval_api.db.database import Database
from serval_api.db.models import ApiKey, NodeToken, utcnow
from serval_api.errors import InvalidArgument, NotFound

API_KEY_PREFIX = "serval_"
NODE_TOKEN_PREFIX = "node_"


def hash_secret(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def new_id() -> str:
    """24 hex characters, the shape of Serval's ObjectIds."""
    return secrets.token_hex(12)


async def create_api_key(db: Database, owner: str, scopes: Iterable[str]) -> tuple[ApiKey, str]:
    """The plaintext is returned once and never stored."""
    if not owner.strip():
        raise InvalidArgument("owner must not be empty")
    plaintext = API_KEY_PREFIX + secrets.token_urlsafe(32)
    record = ApiKey(
        id=new_id(),
        owner=owner,
        scopes=sorted(set(scopes)),
        key_hash=hash_secret(plaintext),
        prefix=plaintext[: len(API_KEY_PREFIX) + 6],
        created_at=utcnow(),
    )
    async with db.session() as s:
        s.add(record)
    return record, plaintext


async def list_api_keys(db: Database, owner: str | None = None) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.created_at)
    if owner is not None:
        query = query.where(ApiKey.owner == owner)
    async with db.session() as s:
        return list((await s.scalars(query)).all())


async def revoke_api_key(db: Database, key_id: str) -> None:
    async with db.session() as s:
        record = await s.get(ApiKey, key_id)
        if record is None:
            raise NotFound(f"API key {key_id} not found")
        record.revoked_at = record.revoked_at or utcnow()


async def authenticate_api_key(db: Database, plaintext: str) -> Caller | None:
    async with db.session() as s:
        record = await s.scalar(select(ApiKey).where(ApiKey.key_hash == hash_secret(plaintext)))
    if record is None or record.revoked_at is not None:
        return None
    return Caller(owner=record.owner, scopes=frozenset(record.scopes))


async def create_node_token(db: Database, name: str) -> tuple[NodeToken, str]:
    """The plaintext is returned once and never stored."""
    plaintext = NODE_TOKEN_PREFIX + secrets.token_urlsafe(32)
    record = NodeToken(id=new_id(), name=name, token_hash=hash_secret(plaintext), created_at=utcnow())
    async with db.session() as s:
        s.add(record)
    return record, plaintext


async def list_node_tokens(db: Database) -> list[NodeToken]:
    async with db.session() as s:
        return list((await s.scalars(select(NodeToken).order_by(NodeToken.created_at))).all())


async def revoke_node_token(db: Database, token_id: str) -> None:
    async with db.session() as s:
        record = await s.get(NodeToken, token_id)
        if record is None:
            raise NotFound(f"node token {token_id} not found")
        record.revoked_at = record.revoked_at or utcnow()


async def verify_node_token(db: Database, plaintext: str) -> str | None:
    """The token's id, or None when it is unknown or revoked."""
    if not plaintext:
        return None
    async with db.session() as s:
        record = await s.scalar(select(NodeToken).where(NodeToken.token_hash == hash_secret(plaintext)))
    return record.id if record is not None and record.revoked_at is None else None
