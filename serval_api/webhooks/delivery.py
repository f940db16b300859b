"""The delivery worker each API replica runs: it claims due outbox rows, POSTs them, signed, to
their hooks' payload URLs and records the outcome.

**One tenant cannot hold another's deliveries.** Each hook is sent independently: every claimed
row is sent by a task of its own, and the worker claims more as soon as any send ends, so a
receiver that never answers holds only its own rows, each for at most `timeout_s`. Due rows are
claimed in turn between owners (each owner's first due row, then each one's second, …), at most
`hook_concurrency` rows of one hook and `owner_concurrency` of one owner in flight at once over
all replicas, and at most `batch_size` on one replica. One build's events go to a hook one after
another, in the order they happened.

**Claims.** A claim marks a row `claimed_by` a token of its claiming round and `claimed_until` a
lease, taken only when the row's POST starts and renewed every third of the lease while it is
sent, so a slow receiver never outlives it and no live replica's row is sent by another. On
PostgreSQL the rows are locked with `FOR UPDATE SKIP LOCKED`, so concurrent replicas claim disjoint
rows; on SQLite the claiming transaction holds the write lock (`BEGIN IMMEDIATE`). The outcome is
recorded only while the claim is still this round's. A replica that dies mid-delivery leaves its
claims to lapse; any replica then sends those rows again: delivery is at least once.

**Retention.** Delivered and given-up records are deleted `delivered_retention_s` and
`failed_retention_s` after their last attempt.
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
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import and_, case, delete, func, or_, select, update

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
STOP_WAIT_S = 10.0
"""How long a stop waits for the worker's database work in progress before canceling it."""
PRUNE_BATCH = 5000
"""Records one pruning statement deletes: a long backlog goes in short transactions."""


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
            timeout=settings.timeout_s,
            follow_redirects=False,
            trust_env=False,
            verify=verify,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=settings.batch_size),
        )
        self._sends: dict[str, asyncio.Task[None]] = {}
        """Delivery id → the task sending it."""
        self._tokens: dict[str, int] = {}
        """Claim token → how many of its rows are being sent: the claims this replica renews."""
        self._stopping = False
        self._recording: set[asyncio.Future[None]] = set()
        """Outcomes being written: a stop lets them finish."""
        self._next_retry: datetime | None = None
        self._next_renewal = 0.0
        self._next_prune = 0.0

    def wake(self) -> None:
        """Deliveries were enqueued (or may have been): look now rather than at the next poll."""
        self._woken.set()

    @property
    def in_flight(self) -> int:
        return len(self._sends)

    async def start(self) -> None:
        if self.metrics is not None:
            self.metrics.webhook_in_flight.set_function(lambda: self.in_flight)
        self._task = asyncio.create_task(self._run(), name="webhook-delivery")

    async def stop(self) -> None:
        """Stop at once (started or not); rows claimed mid-delivery are released for any replica to
        send again."""
        # The loop ends at its next wait, never inside a transaction (a connection left mid-way would
        # keep SQLite's write lock); one stuck on an unreachable database is canceled.
        self._stopping = True
        self._woken.set()
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), STOP_WAIT_S)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        tokens = set(self._tokens)
        sends = list(self._sends.values())
        for send in sends:
            send.cancel()
        await asyncio.gather(*sends, return_exceptions=True)
        await asyncio.gather(*self._recording, return_exceptions=True)
        if tokens:
            try:
                await self._release(tokens)
            except Exception:
                log.warning(
                    "could not release claimed webhook deliveries; their lease will lapse", exc_info=True
                )
        await self._client.aclose()

    async def _run(self) -> None:
        while not self._stopping:
            self._woken.clear()
            try:
                await self._maintain()
                if not self._stopping:
                    self._start_due(await self._claim(self.settings.batch_size - self.in_flight))
            except Exception:
                log.exception("webhook delivery round failed", extra={"replica": self.replica})
            if self._stopping:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self._wait_s())

    def _wait_s(self) -> float:
        now = time.monotonic()
        wait = min(self.settings.poll_interval_s, max(self._next_prune - now, 0.0))
        if self._tokens:
            wait = min(wait, max(self._next_renewal - now, 0.0))
        if self._next_retry is not None:
            until_retry = (self._next_retry - utcnow()).total_seconds()
            if until_retry <= wait:
                self._next_retry = None
                wait = max(until_retry, 0.0)
        return wait

    async def _maintain(self) -> None:
        """Renew this replica's claims and prune old records, each when it is due."""
        now = time.monotonic()
        if self._tokens and now >= self._next_renewal:
            self._next_renewal = now + self.settings.claim_lease_s / 3
            await self._renew()
        if now >= self._next_prune:
            self._next_prune = now + self.settings.prune_interval_s
            await self.prune()

    async def deliver_due(self) -> int:
        """One round, waited for: claim the due rows this replica may send now, deliver them, record
        the outcomes; returns how many."""
        sends = self._start_due(await self._claim(self.settings.batch_size - self.in_flight))
        await asyncio.gather(*sends, return_exceptions=True)
        return len(sends)

    def _start_due(self, claims: list[Claim]) -> list[asyncio.Task[None]]:
        if claims:
            self._next_renewal = min(self._next_renewal, time.monotonic() + self.settings.claim_lease_s / 3)
        sends = []
        for claim in claims:
            self._tokens[claim.token] = self._tokens.get(claim.token, 0) + 1
            send = asyncio.create_task(self._send(claim), name=f"webhook-{claim.delivery_id}")
            self._sends[claim.delivery_id] = send
            sends.append(send)
        return sends

    async def _send(self, claim: Claim) -> None:
        try:
            await self._deliver(claim)
        except Exception as e:
            log.error(
                "webhook delivery failed", exc_info=e, extra={**claim.log_extra, "replica": self.replica}
            )
        finally:
            self._sends.pop(claim.delivery_id, None)
            left = self._tokens.get(claim.token, 1) - 1
            if left > 0:
                self._tokens[claim.token] = left
            else:
                self._tokens.pop(claim.token, None)
            self.wake()  # a slot is free: this hook's next row, or another owner's, may go

    async def _claim(self, capacity: int) -> list[Claim]:
        """Claim up to `capacity` due rows, in turn between owners, within the hooks' and owners'
        concurrency; each row is sent as soon as it is claimed."""
        if capacity <= 0:
            return []
        token = f"{self.replica[:180]}/{secrets.token_hex(6)}"
        now = utcnow()
        async with self.db.session() as s:
            ids = list((await s.scalars(self._fair_pick(now, capacity))).all())
            if not ids:
                return []
            free = or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now)
            still_due = (
                select(WebhookDelivery)
                .where(
                    WebhookDelivery.id.in_(ids),
                    WebhookDelivery.state == DeliveryState.PENDING.value,
                    WebhookDelivery.next_attempt_at <= now,
                    free,
                )
                .with_for_update(skip_locked=True)
            )
            rows = list((await s.scalars(still_due)).all())
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

    def _fair_pick(self, now: datetime, capacity: int) -> Any:
        """The ids of the rows to claim now. Of the rows due or in flight (a live claim, on any
        replica): of each (hook, build) only the oldest may go, and none while one is in flight (a
        row waiting for its retry lets the next one go); of each hook, the first `hook_concurrency`
        of those, counting the ones in flight first; of each owner, the first `owner_concurrency`
        of those, again counting the ones in flight; then every owner's first, every owner's
        second, …, up to `capacity` rows not yet in flight."""
        d = WebhookDelivery
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
                .over(
                    partition_by=h.owner, order_by=(h.idle, h.in_hook, h.next_attempt_at, h.created_at, h.id)
                )
                .label("in_owner"),
            )
            .where(h.in_hook <= self.settings.hook_concurrency)
            .subquery("lanes")
        )
        lane = lanes.c
        return (
            select(lane.id)
            .where(lane.idle == 1, lane.in_owner <= self.settings.owner_concurrency)
            .order_by(lane.in_owner, lane.next_attempt_at, lane.created_at, lane.id)
            .limit(capacity)
        )

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
        # A stop cancels the POST, never a transaction half done: `stop` waits for the recording.
        recording = asyncio.ensure_future(self._record(claim, status, error))
        self._recording.add(recording)
        recording.add_done_callback(self._recording.discard)
        await asyncio.shield(recording)

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
            row.last_attempt_at = now
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

    async def _renew(self) -> None:
        """Extend the lease of every row this replica is sending: a slow receiver never outlives it."""
        tokens = list(self._tokens)
        if not tokens:
            return
        lease = utcnow() + timedelta(seconds=self.settings.claim_lease_s)
        async with self.db.session() as s:
            await s.execute(
                update(WebhookDelivery)
                .where(
                    WebhookDelivery.claimed_by.in_(tokens),
                    WebhookDelivery.state == DeliveryState.PENDING.value,
                )
                .values(claimed_until=lease)
            )

    async def prune(self) -> int:
        """Delete delivered and given-up records past their retention; returns how many."""
        now = utcnow()
        pruned = 0
        for state, keep_s in (
            (DeliveryState.DELIVERED, self.settings.delivered_retention_s),
            (DeliveryState.FAILED, self.settings.failed_retention_s),
        ):
            if keep_s <= 0:
                continue
            before = now - timedelta(seconds=keep_s)
            while True:
                old = (
                    select(WebhookDelivery.id)
                    .where(WebhookDelivery.state == state.value, WebhookDelivery.last_attempt_at < before)
                    .limit(PRUNE_BATCH)
                )
                async with self.db.session() as s:
                    ids = list((await s.scalars(old)).all())
                    if ids:
                        await s.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(ids)))
                pruned += len(ids)
                if self.metrics is not None and ids:
                    self.metrics.webhook_pruned.labels(state.value).inc(len(ids))
                if len(ids) < PRUNE_BATCH:
                    break
        if pruned:
            log.info("webhook delivery records pruned", extra={"count": pruned, "replica": self.replica})
        return pruned
