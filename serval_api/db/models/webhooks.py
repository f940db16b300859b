"""Webhooks and their delivery outbox (`serval_api/webhooks/`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from serval_api.db.models.base import Base, utcnow


class WebhookRow(Base):
    """A client's webhook: its events on the owner's engines are POSTed to `payload_url`, signed
    with `secret` (never sent back to clients)."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    payload_url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(500))
    events: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class DeliveryState(StrEnum):
    PENDING = "Pending"
    DELIVERED = "Delivered"
    FAILED = "Failed"


class WebhookDeliveryRow(Base):
    """The durable outbox: one row per event and hook, written in the same transaction as the
    change it reports; a replica claims due rows, POSTs `body` and records the outcome."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("webhook_deliveries_due", "state", "next_attempt_at"),
        Index("webhook_deliveries_settled", "state", "last_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    event: Mapped[str] = mapped_column(String(64))
    build_id: Mapped[str | None] = mapped_column(String(64), default=None)
    """The build the event is about: one build's events go to a hook one after another, in order.
    None (rows enqueued before the column): each row on its own."""
    body: Mapped[str] = mapped_column(Text)
    """The exact JSON text sent (and signed)."""
    state: Mapped[str] = mapped_column(String(16), default=DeliveryState.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_by: Mapped[str | None] = mapped_column(String(200), default=None)
    claimed_until: Mapped[datetime | None] = mapped_column(default=None)
    last_status: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str | None] = mapped_column(String(500), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    last_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    """When the latest attempt ended: records are pruned this long after they were delivered or
    given up (`webhooks.delivered_retention_s`, `failed_retention_s`)."""
