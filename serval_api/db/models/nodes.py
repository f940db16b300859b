"""Inference nodes as the API service sees them: one row per node, one per live session."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from serval_api.db.models.base import Base, utcnow


class NodeRow(Base):
    """An inference node as last seen by this API replica; live routing state stays in memory."""

    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(200), default="")
    session_id: Mapped[str | None] = mapped_column(String(64), default=None)
    api_instance_id: Mapped[str | None] = mapped_column(String(200), default=None)
    software_version: Mapped[str | None] = mapped_column(String(64), default=None)
    free_slots: Mapped[int] = mapped_column(Integer, default=0)
    first_seen: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow)
    token_id: Mapped[str | None] = mapped_column(String(64), default=None)
    drain_reason: Mapped[str | None] = mapped_column(String(500), default=None)
    """Set while an admin has the node drained: it is told to drain again whenever it connects."""


class NodeSessionRow(Base):
    """One live node session with one API replica: a node dialing every replica has one per replica,
    and is connected while it has any."""

    __tablename__ = "node_sessions"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(200), index=True)
    api_instance_id: Mapped[str] = mapped_column(String(200), index=True)
    opened_at: Mapped[datetime] = mapped_column(default=utcnow)
