"""Who may call: API keys (clients) and node tokens (inference nodes), stored as sha256 hashes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from serval_api.db.models.base import Base, utcnow


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    """Serval's `clientId`: whose entities the key reaches."""
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    """What the key is for; None for a key made without one (before Serval 1.20's `name`)."""
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    """From then on the key authenticates nothing; None: it does not expire."""
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    engine_id: Mapped[str | None] = mapped_column(String(64), default=None)
    """The engine the key is bound to (one of its owner's): the SIL Converters and LibreTranslate
    dialects, whose clients name no engine, translate with it. None: with the public base model.
    No foreign key: a key whose engine was deleted says so instead of quietly becoming unbound."""
    limits: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """An administrator's overrides of the per-key limits (`LimitSettings` field → value); None or
    a missing field: the setting."""


class NodeTokenRow(Base):
    __tablename__ = "node_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
