"""Pruning settled delivery records: delivered and given-up rows are deleted
`delivered_retention_s` and `failed_retention_s` after their last attempt.

It stands apart from the worker because it never touches a pending row: it only keeps the
outbox table from growing, in short transactions, whatever the worker is sending.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, select

from serval_api.db.database import Database
from serval_api.db.models import DeliveryState, WebhookDeliveryRow, utcnow
from serval_common.settings import WebhookSettings

if TYPE_CHECKING:
    from serval_api.metrics import ApiMetrics

log = logging.getLogger(__name__)

PRUNE_BATCH = 5000
"""Records one pruning statement deletes: a long backlog goes in short transactions."""


async def prune_settled(
    db: Database, settings: WebhookSettings, *, replica: str, metrics: ApiMetrics | None = None
) -> int:
    """Delete delivered and given-up records past their retention; returns how many."""
    now = utcnow()
    pruned = 0
    for state, keep_s in (
        (DeliveryState.DELIVERED, settings.delivered_retention_s),
        (DeliveryState.FAILED, settings.failed_retention_s),
    ):
        if keep_s <= 0:
            continue
        before = now - timedelta(seconds=keep_s)
        while True:
            old = (
                select(WebhookDeliveryRow.id)
                .where(WebhookDeliveryRow.state == state.value, WebhookDeliveryRow.last_attempt_at < before)
                .limit(PRUNE_BATCH)
            )
            async with db.session() as s:
                ids = list((await s.scalars(old)).all())
                if ids:
                    await s.execute(delete(WebhookDeliveryRow).where(WebhookDeliveryRow.id.in_(ids)))
            pruned += len(ids)
            if metrics is not None and ids:
                metrics.webhook_pruned.labels(state.value).inc(len(ids))
            if len(ids) < PRUNE_BATCH:
                break
    if pruned:
        log.info("webhook delivery records pruned", extra={"count": pruned, "replica": replica})
    return pruned
