"""The delivery worker each API replica runs: it claims due outbox rows, POSTs them, signed, to
their hooks' payload URLs and records the outcome.

A claim marks a row `claimed_by` a token of this round and `claimed_until` a lease; on PostgreSQL
the rows are picked with `FOR UPDATE SKIP LOCKED`, so concurrent replicas claim disjoint rows, and
on SQLite the claiming transaction holds the write lock (`BEGIN IMMEDIATE`). The outcome is
recorded only while the claim is still this round's. A replica that dies mid-delivery leaves its
claims to lapse; any replica then sends those rows again: delivery is at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import or_, select, update

from serval_api.db.database import Database
from serval_api.db.models import DeliveryState, Webhook, WebhookDelivery, utcnow
from serval_api.webhooks.addresses import AddressPolicy, RefusedAddress
from serval_common.settings import WebhookSettings

if TYPE_CHECKING:
    from serval_api.metrics import ApiMetrics

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
MAX_DELAY_DOUBLINGS = 11
"""Serval's delays double from 1 s up to 2048 s, then stay there."""
ERROR_CHARS = 500


def signature(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value of `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retry_delay_s(attempts: int, base_s: float) -> float:
    """The wait after the `attempts`-th failed attempt: base × 1, 2, 4, … 1024, then 2048."""
    return base_s * 2 ** min(max(attempts - 1, 0), MAX_DELAY_DOUBLINGS)


@dataclass(frozen=True)
class Claim:
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


class DeliveryWorker:
    def __init__(
        self,
        db: Database,
        settings: WebhookSettings,
        *,
        replica: str,
        metrics: ApiMetrics | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """`verify`: how receivers' TLS certificates are checked (default: the system's CAs)."""
        self.db = db
        self.settings = settings
        self.replica = replica
        self.metrics = metrics
        self.policy = AddressPolicy(settings.allowed_networks)
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # No proxies from the environment: a proxy would connect to the host name again, past the address check.
        self._client = httpx.AsyncClient(
            timeout=settings.timeout_s, follow_redirects=False, trust_env=False, verify=verify
        )
        self._in_flight: set[str] = set()
        self._next_retry: datetime | None = None

    def wake(self) -> None:
        """Deliveries were enqueued (or may have been): look now rather than at the next poll."""
        self._woken.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="webhook-delivery")

    async def stop(self) -> None:
        """Stop at once (started or not); rows claimed mid-delivery are released for any replica to
        send again."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._in_flight:
            tokens, self._in_flight = set(self._in_flight), set()
            try:
                await self._release(tokens)
            except Exception:
                log.warning(
                    "could not release claimed webhook deliveries; their lease will lapse", exc_info=True
                )
        await self._client.aclose()

    async def _run(self) -> None:
        while True:
            self._woken.clear()
            claimed = 0
            try:
                claimed = await self.deliver_due()
            except Exception:
                log.exception("webhook delivery round failed", extra={"replica": self.replica})
            if claimed >= self.settings.batch_size:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self._wait_s())

    def _wait_s(self) -> float:
        wait = self.settings.poll_interval_s
        if self._next_retry is not None:
            until_retry = (self._next_retry - utcnow()).total_seconds()
            if until_retry <= wait:
                self._next_retry = None
                wait = max(until_retry, 0.0)
        return wait

    async def deliver_due(self) -> int:
        """One round: claim the due rows, deliver them, record the outcomes; returns how many."""
        claims = await self._claim()
        if not claims:
            return 0
        token = claims[0].token
        # Left in the set when the round is canceled: `stop` releases those rows.
        self._in_flight.add(token)
        by_hook: dict[str, list[Claim]] = {}
        for claim in claims:
            by_hook.setdefault(claim.hook_id, []).append(claim)
        results = await asyncio.gather(
            *(self._deliver_in_order(group) for group in by_hook.values()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                log.error("webhook delivery failed", exc_info=result, extra={"replica": self.replica})
        self._in_flight.discard(token)
        return len(claims)

    async def _claim(self) -> list[Claim]:
        token = f"{self.replica[:180]}/{secrets.token_hex(6)}"
        now = utcnow()
        due = (
            select(WebhookDelivery)
            .where(
                WebhookDelivery.state == DeliveryState.PENDING.value,
                WebhookDelivery.next_attempt_at <= now,
                or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
            )
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.created_at, WebhookDelivery.id)
            .limit(self.settings.batch_size)
            .with_for_update(skip_locked=True)
        )
        async with self.db.session() as s:
            rows = list((await s.scalars(due)).all())
            if not rows:
                return []
            hook_ids = {row.hook_id for row in rows}
            hooks = {
                h.id: h for h in (await s.scalars(select(Webhook).where(Webhook.id.in_(hook_ids)))).all()
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

    async def _deliver_in_order(self, claims: list[Claim]) -> None:
        for claim in claims:
            await self._deliver(claim)

    async def _deliver(self, claim: Claim) -> None:
        status: int | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                status = await self._post(claim)
            if not 200 <= status < 300:
                error = f"the payload URL answered HTTP {status}"
        except RefusedAddress as e:
            error = f"refused: {e}"
        except (httpx.HTTPError, OSError, TimeoutError) as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        await self._record(claim, status, error)

    async def _post(self, claim: Claim) -> int:
        parts = urlsplit(claim.payload_url)
        host = parts.hostname or ""
        https = parts.scheme.lower() == "https"
        address = await self.policy.resolve(host, parts.port or (443 if https else 80))
        pinned = f"[{address}]" if address.version == 6 else str(address)
        if parts.port is not None:
            pinned += f":{parts.port}"
        url = urlunsplit((parts.scheme, pinned, parts.path or "/", parts.query, ""))
        body = claim.body.encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(claim.secret, body),
            "Host": parts.netloc.rpartition("@")[2],
            "User-Agent": "serval-live-webhooks",
        }
        # TLS still verifies the certificate against the host name, sent as SNI.
        extensions = {"sni_hostname": host} if https else {}
        request = self._client.build_request(
            "POST", url, content=body, headers=headers, extensions=extensions
        )
        response = await self._client.send(request, stream=True)
        await response.aclose()
        return response.status_code

    async def _record(self, claim: Claim, status: int | None, error: str | None) -> None:
        now = utcnow()
        extra = {**claim.log_extra, "attempt": claim.attempts + 1, "status": status}
        async with self.db.session() as s:
            row = await s.get(WebhookDelivery, claim.delivery_id, with_for_update=True)
            if row is None or row.claimed_by != claim.token or row.state != DeliveryState.PENDING.value:
                log.warning("webhook delivery claim lost before its outcome was recorded", extra=extra)
                return
            row.attempts += 1
            row.last_status = status
            row.last_error = None if error is None else error[:ERROR_CHARS]
            row.claimed_by = row.claimed_until = None
            if error is None:
                row.state = DeliveryState.DELIVERED.value
                row.delivered_at = now
                outcome = "delivered"
            elif row.attempts >= self.settings.max_attempts:
                row.state = DeliveryState.FAILED.value
                outcome = "gave_up"
            else:
                row.next_attempt_at = now + timedelta(
                    seconds=retry_delay_s(row.attempts, self.settings.retry_base_s)
                )
                if self._next_retry is None or row.next_attempt_at < self._next_retry:
                    self._next_retry = row.next_attempt_at
                outcome = "failed_attempt"
        if self.metrics is not None:
            self.metrics.webhook_deliveries.labels(outcome).inc()
        if outcome == "delivered":
            log.info("webhook delivered", extra=extra)
        elif outcome == "gave_up":
            log.warning("webhook delivery given up", extra={**extra, "error": error})
        else:
            log.info("webhook delivery failed; retrying later", extra={**extra, "error": error})

    async def _release(self, tokens: Iterable[str]) -> None:
        async with self.db.session() as s:
            await s.execute(
                update(WebhookDelivery)
                .where(
                    WebhookDelivery.claimed_by.in_(list(tokens)),
                    WebhookDelivery.state == DeliveryState.PENDING.value,
                )
                .values(claimed_by=None, claimed_until=None)
            )
