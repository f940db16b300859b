"""Per-key limits shared across API replicas: request counts per window and open long polls
(written and read by the service layer, `service/quotas.py`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from serval_api.db.models.base import Base


class RateWindowRow(Base):
    """How much of a per-key limit was taken in one fixed window (`service/quotas.py`): every
    replica adds to the same row atomically, so the limit holds across replicas and restarts.
    Windows that ended are pruned."""

    __tablename__ = "rate_windows"

    subject: Mapped[str] = mapped_column(String(250), primary_key=True)
    """Whose: `key:{id}`, `jwt:{owner}` or `owner:{owner}`."""
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    """The window's start, in seconds since the epoch (a multiple of its length)."""
    used: Mapped[int] = mapped_column(BigInteger, default=0)
    """Taken by every replica so far (a replica takes a few at a time; it may pass the limit)."""


class LongPollCountRow(Base):
    """How many long polls of one subject one replica holds waiting: each replica writes its own
    counts about once a second and reads the others', so a key's concurrent long polls are counted
    over all replicas. A replica renews `expires_at` while it runs; a dead one's rows lapse."""

    __tablename__ = "long_poll_counts"

    subject: Mapped[str] = mapped_column(String(250), primary_key=True)
    replica: Mapped[str] = mapped_column(String(200), primary_key=True)
    held: Mapped[int] = mapped_column(Integer, default=0)
    expires_at: Mapped[datetime] = mapped_column()
