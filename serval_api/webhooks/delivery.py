"""The delivery worker each API replica runs: it claims due outbox rows (`claims`), POSTs them,
signed, to their hooks' payload URLs (`sending`), records the outcome (`outcomes`) and prunes
settled records (`retention`). This module is the loop that ties them together and decides when
each runs.

**One tenant cannot hold another's deliveries.** Each hook is sent independently: every claimed
row is sent by a task of its own, and the worker claims more as soon as any send ends, so a
receiver that never answers holds only its own rows, each for at most `timeout_s`. At most
`batch_size` rows are in flight on one replica; which rows go, in turn between owners, is the
claims' to say.

**Leases.** The worker renews its claims every third of the lease while their rows are sent, so a
slow receiver never outlives one. A stop cancels the POSTs in flight, lets the outcomes being
written finish, and releases the rest of its claims for any replica to send again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from datetime import datetime
from typing import TYPE_CHECKING

from serval_api.db.database import Database
from serval_api.db.models import utcnow
from serval_api.webhooks.claims import Claim, DeliveryClaims
from serval_api.webhooks.outcomes import record_attempt
from serval_api.webhooks.retention import prune_settled
from serval_api.webhooks.sending import Attempt, WebhookSender
from serval_common.settings import WebhookSettings

if TYPE_CHECKING:
    from serval_api.metrics import ApiMetrics

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0
"""How long a stop waits for the worker's database work in progress before canceling it."""


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
        self.claims = DeliveryClaims(db, settings, replica=replica)
        self.sender = WebhookSender(settings, verify=verify)
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
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
                await self.claims.release(tokens)
            except Exception:
                log.warning(
                    "could not release claimed webhook deliveries; their lease will lapse", exc_info=True
                )
        await self.sender.aclose()

    async def _run(self) -> None:
        while not self._stopping:
            self._woken.clear()
            try:
                await self._maintain()
                if not self._stopping:
                    self._start_due(await self.claims.claim(self.settings.batch_size - self.in_flight))
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
            await self.claims.renew(self._tokens)
        if now >= self._next_prune:
            self._next_prune = now + self.settings.prune_interval_s
            await prune_settled(self.db, self.settings, replica=self.replica, metrics=self.metrics)

    async def deliver_due(self) -> int:
        """One round, waited for: claim the due rows this replica may send now, deliver them, record
        the outcomes; returns how many."""
        sends = self._start_due(await self.claims.claim(self.settings.batch_size - self.in_flight))
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

    async def _deliver(self, claim: Claim) -> None:
        attempt = await self.sender.attempt(claim.payload_url, claim.secret, claim.body)
        # A stop cancels the POST, never a transaction half done: `stop` waits for the recording.
        recording = asyncio.ensure_future(self._record(claim, attempt))
        self._recording.add(recording)
        recording.add_done_callback(self._recording.discard)
        await asyncio.shield(recording)

    async def _record(self, claim: Claim, attempt: Attempt) -> None:
        due = await record_attempt(self.db, self.settings, claim, attempt, metrics=self.metrics)
        if due is not None and (self._next_retry is None or due < self._next_retry):
            self._next_retry = due
