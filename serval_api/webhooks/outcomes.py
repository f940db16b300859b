"""Recording how a delivery attempt went, and when a failed one is tried again.

It stands apart from the worker because it is the retry policy: Serval's doubling delays, the
attempt limit after which a delivery is given up, and the rule that an outcome is recorded only
while the row's claim is still the claiming round's (a lapsed claim another replica took over
records nothing here).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from serval_api.db.database import Database
from serval_api.db.models import DeliveryState, WebhookDeliveryRow, utcnow
from serval_api.webhooks.claims import Claim
from serval_api.webhooks.sending import Attempt
from serval_common.settings import WebhookSettings

if TYPE_CHECKING:
    from serval_api.metrics import ApiMetrics

log = logging.getLogger(__name__)

MAX_DELAY_DOUBLINGS = 11
"""Serval's delays double from 1 s up to 2048 s, then stay there."""
ERROR_CHARS = 500


def retry_delay_s(attempts: int, base_s: float) -> float:
    """The wait after the `attempts`-th failed attempt: base × 1, 2, 4, … 1024, then 2048."""
    return base_s * 2 ** min(max(attempts - 1, 0), MAX_DELAY_DOUBLINGS)


async def record_attempt(
    db: Database,
    settings: WebhookSettings,
    claim: Claim,
    attempt: Attempt,
    *,
    metrics: ApiMetrics | None = None,
) -> datetime | None:
    """Record `attempt` on the claimed row: delivered, failed (retried after `retry_delay_s`) or
    given up after `max_attempts`. Returns when the row is due again, None when it is not."""
    now = utcnow()
    status, error = attempt.status, attempt.error
    extra = {**claim.log_extra, "attempt": claim.attempts + 1, "status": status}
    next_attempt_at: datetime | None = None
    async with db.session() as s:
        row = await s.get(WebhookDeliveryRow, claim.delivery_id, with_for_update=True)
        if row is None or row.claimed_by != claim.token or row.state != DeliveryState.PENDING.value:
            log.warning("webhook delivery claim lost before its outcome was recorded", extra=extra)
            return None
        row.attempts += 1
        row.last_attempt_at = now
        row.last_status = status
        row.last_error = None if error is None else error[:ERROR_CHARS]
        row.claimed_by = row.claimed_until = None
        if error is None:
            row.state = DeliveryState.DELIVERED.value
            row.delivered_at = now
            outcome = "delivered"
        elif row.attempts >= settings.max_attempts:
            row.state = DeliveryState.FAILED.value
            outcome = "gave_up"
        else:
            row.next_attempt_at = next_attempt_at = now + timedelta(
                seconds=retry_delay_s(row.attempts, settings.retry_base_s)
            )
            outcome = "failed_attempt"
    if metrics is not None:
        metrics.webhook_deliveries.labels(outcome).inc()
    if outcome == "delivered":
        log.info("webhook delivered", extra=extra)
    elif outcome == "gave_up":
        log.warning("webhook delivery given up", extra={**extra, "error": error})
    else:
        log.info("webhook delivery failed; retrying later", extra={**extra, "error": error})
    return next_attempt_at
