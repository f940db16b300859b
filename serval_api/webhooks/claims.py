"""Claiming due outbox rows fairly between owners, and holding the claims while they are sent.

It stands apart from the delivery worker because it is the part that talks to the other replicas:
everything here is a statement on the shared `webhook_deliveries` table, and the worker only asks
for rows, renews them and lets them go.

**Fairness.** Due rows are claimed in turn between owners (each owner's first due row, then each
one's second, …), at most `hook_concurrency` rows of one hook and `owner_concurrency` of one owner
in flight at once over all replicas. One build's events go to a hook one after another, in the
order they happened.

**Claims.** A claim marks a row `claimed_by` a token of its claiming round and `claimed_until` a
lease, taken only when the row's POST starts and renewed while it is sent, so a slow receiver
never outlives it and no live replica's row is sent by another. On PostgreSQL the rows are locked
with `FOR UPDATE SKIP LOCKED`, so concurrent replicas claim disjoint rows; on SQLite the claiming
transaction holds the write lock (`BEGIN IMMEDIATE`). A replica that dies mid-delivery leaves its
claims to lapse; any replica then sends those rows again: delivery is at least once.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import Integer, and_, bindparam, case, func, or_, select, update

from serval_api.db.database import Database
from serval_api.db.models import DeliveryState, UtcDateTime, WebhookDeliveryRow, WebhookRow, utcnow
from serval_common.settings import WebhookSettings


@dataclass(frozen=True)
class Claim:
    """One claimed row with what its POST needs; `token` names the claiming round."""

    token: str
    delivery_id: str
    hook_id: str
    event: str
    body: str
    attempts: int
    payload_url: str
    secret: str = field(repr=False)

    @property
    def log_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "delivery_id": self.delivery_id,
            "hook_id": self.hook_id,
            "event": self.event,
        }
        with contextlib.suppress(ValueError, KeyError, TypeError):
            payload = json.loads(self.body)["payload"]
            extra["build_id"] = payload["build"]["id"]
            extra["engine_id"] = payload["engine"]["id"]
        return extra


class DeliveryClaims:
    """One replica's claims on the outbox: take due rows, renew their leases, release them."""

    def __init__(self, db: Database, settings: WebhookSettings, *, replica: str) -> None:
        self.db = db
        self.settings = settings
        self.replica = replica
        self._pick = fair_pick(
            hook_concurrency=settings.hook_concurrency, owner_concurrency=settings.owner_concurrency
        )
        """Built once: every replica runs it each poll, and building it cost more than running it."""

    async def claim(self, capacity: int) -> list[Claim]:
        """Claim up to `capacity` due rows, in turn between owners, within the hooks' and owners'
        concurrency; each row is sent as soon as it is claimed."""
        if capacity <= 0:
            return []
        token = f"{self.replica[:180]}/{secrets.token_hex(6)}"
        now = utcnow()
        async with self.db.session() as s:
            ids = list((await s.scalars(self._pick, {"now": now, "capacity": capacity})).all())
            if not ids:
                return []
            free = or_(WebhookDeliveryRow.claimed_until.is_(None), WebhookDeliveryRow.claimed_until < now)
            still_due = (
                select(WebhookDeliveryRow)
                .where(
                    WebhookDeliveryRow.id.in_(ids),
                    WebhookDeliveryRow.state == DeliveryState.PENDING.value,
                    WebhookDeliveryRow.next_attempt_at <= now,
                    free,
                )
                .with_for_update(skip_locked=True)
            )
            rows = list((await s.scalars(still_due)).all())
            if not rows:
                return []
            hook_ids = {row.hook_id for row in rows}
            hooks = {
                h.id: h
                for h in (await s.scalars(select(WebhookRow).where(WebhookRow.id.in_(hook_ids)))).all()
            }
            lease = now + timedelta(seconds=self.settings.claim_lease_s)
            claims = []
            for row in rows:
                row.claimed_by, row.claimed_until = token, lease
                hook = hooks[row.hook_id]
                claims.append(
                    Claim(
                        token=token,
                        delivery_id=row.id,
                        hook_id=row.hook_id,
                        event=row.event,
                        body=row.body,
                        attempts=row.attempts,
                        payload_url=hook.payload_url,
                        secret=hook.secret,
                    )
                )
        return claims

    async def renew(self, tokens: Iterable[str]) -> None:
        """Extend the lease of every pending row claimed by `tokens`: a slow receiver never
        outlives it."""
        await self._set_claims(
            tokens, claimed_until=utcnow() + timedelta(seconds=self.settings.claim_lease_s)
        )

    async def release(self, tokens: Iterable[str]) -> None:
        """Let go of the pending rows claimed by `tokens`, for any replica to send again."""
        await self._set_claims(tokens, claimed_by=None, claimed_until=None)

    async def _set_claims(self, tokens: Iterable[str], **values: Any) -> None:
        tokens = list(tokens)
        if not tokens:
            return
        async with self.db.session() as s:
            await s.execute(
                update(WebhookDeliveryRow)
                .where(
                    WebhookDeliveryRow.claimed_by.in_(tokens),
                    WebhookDeliveryRow.state == DeliveryState.PENDING.value,
                )
                .values(**values)
            )


def fair_pick(*, hook_concurrency: int, owner_concurrency: int) -> Any:
    """The ids of the rows to claim at the bound parameter `now`, at most the bound `capacity`.
    Of the rows due or in flight (a live claim, on any replica): of each (hook, build) only the
    oldest may go, and none while one is in flight (a row waiting for its retry lets the next one
    go); of each hook, the first `hook_concurrency` of those, counting the ones in flight first;
    of each owner, the first `owner_concurrency` of those, again counting the ones in flight;
    then every owner's first, every owner's second, …, up to `capacity` rows not yet in flight."""
    d = WebhookDeliveryRow
    now = bindparam("now", type_=UtcDateTime())
    in_flight = and_(d.claimed_until.is_not(None), d.claimed_until >= now)
    pending = (
        select(
            d.id,
            d.hook_id,
            d.owner,
            d.next_attempt_at,
            d.created_at,
            case((in_flight, 0), else_=1).label("idle"),
            func.row_number()
            .over(
                partition_by=(d.hook_id, func.coalesce(d.build_id, d.id)),
                order_by=(case((in_flight, 0), else_=1), d.created_at, d.id),
            )
            .label("in_build"),
        )
        .where(d.state == DeliveryState.PENDING.value, or_(in_flight, d.next_attempt_at <= now))
        .subquery("pending")
    )
    p = pending.c
    heads = (
        select(
            p.id,
            p.owner,
            p.next_attempt_at,
            p.created_at,
            p.idle,
            func.row_number()
            .over(partition_by=p.hook_id, order_by=(p.idle, p.next_attempt_at, p.created_at, p.id))
            .label("in_hook"),
        )
        .where(or_(p.in_build == 1, p.idle == 0))
        .subquery("heads")
    )
    h = heads.c
    lanes = (
        select(
            h.id,
            h.next_attempt_at,
            h.created_at,
            h.idle,
            func.row_number()
            .over(partition_by=h.owner, order_by=(h.idle, h.in_hook, h.next_attempt_at, h.created_at, h.id))
            .label("in_owner"),
        )
        .where(h.in_hook <= hook_concurrency)
        .subquery("lanes")
    )
    lane = lanes.c
    return (
        select(lane.id)
        .where(lane.idle == 1, lane.in_owner <= owner_concurrency)
        .order_by(lane.in_owner, lane.next_attempt_at, lane.created_at, lane.id)
        .limit(bindparam("capacity", type_=Integer()))
    )
