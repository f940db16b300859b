"""One tenant cannot stall the others' webhooks: hooks are sent independently, claims take turns
between owners, a claim's lease holds for its whole send, hooks per owner are capped, and settled
records are pruned. Real receivers on 127.0.0.1, real databases (SQLite, or PostgreSQL under
scripts/postgres.sh)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from serval_api.db.database import Database
from serval_api.db.models import WebhookDeliveryRow, WebhookRow, utcnow
from serval_api.webhooks.delivery import DeliveryWorker
from serval_common.settings import WebhookSettings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_metrics import sample
from tests.api.test_webhooks import (
    ALL_EVENTS,
    SECRET,
    client_of,
    deliveries,
    echo_build,
    hook_settings,
    register,
)
from tests.api.webhook_receiver import Receiver, Silent, wait_until
from tests.helpers import metrics_text

HOSTILE_HOOKS = 3
HOSTILE_BUILDS = 40
FEW_SECONDS = 5.0
"""A bound against hangs, not a timing: A's events arrive in well under a second."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver(SECRET).start()
    try:
        yield started
    finally:
        started.stop()


def start_echo_builds(client: httpx.Client, count: int) -> None:
    """`count` echo builds, not waited for: each completes at once and enqueues its two events."""
    for _ in range(count):
        engine_id = create_engine(client, "echo")["id"]
        response = client.post(f"/translation/engines/{engine_id}/builds", json={})
        assert response.status_code == 201, response.text


def test_a_hostile_owner_does_not_delay_another_owners_events(tmp_path: Path, database_url: str) -> None:
    """The issue's attack: owner B points 3 hooks at a receiver that accepts and never answers and
    runs 40 echo builds, and keeps building while A waits. A's events still arrive at once."""
    # B's POSTs give up after 2 s and retry soon: A's events go out while waves of B's rows are
    # in flight, failing and coming due again (a retried Started beside its build's Finished).
    settings = hook_settings(tmp_path, database_url, timeout_s=2.0, retry_base_s=0.2)
    api = RunningApi(settings)
    silent = Silent().start()
    receiver = Receiver(SECRET).start()
    stop_b = threading.Event()
    try:
        with client_of(api, "owner-b") as b, client_of(api) as a:
            for _ in range(HOSTILE_HOOKS):
                register(b, silent.url)
            start_echo_builds(b, HOSTILE_BUILDS)
            hostile_rows = 2 * HOSTILE_BUILDS * HOSTILE_HOOKS
            wait_until(lambda: len(deliveries(api)) >= hostile_rows, 30, "B's events enqueued")
            # every one of B's rows is tried once before any is retried: a bound, not a speed
            wait_until(
                lambda: max(r.attempts for r in deliveries(api)) >= 2,
                180,
                "B's deliveries failing and retried",
            )
            assert claimed_now(api, "owner-b") <= settings.webhooks.owner_concurrency

            def keep_building() -> None:
                with client_of(api, "owner-b") as more:
                    while not stop_b.wait(0.05):
                        start_echo_builds(more, 1)

            builder = threading.Thread(target=keep_building, daemon=True)
            builder.start()
            register(a, receiver.url)
            _, build_id = echo_build(a)
            finished = time.monotonic()
            received = receiver.wait_for(2, timeout_s=FEW_SECONDS)
            waited = time.monotonic() - finished
            hanging = silent.open
            claimed_b = claimed_now(api, "owner-b")
            stop_b.set()
            builder.join(10)
        assert [r.json["event"] for r in received] == ALL_EVENTS
        assert all(r.json["payload"]["build"]["id"] == build_id for r in received)
        assert 0 < claimed_b <= settings.webhooks.owner_concurrency, "one owner took more than its share"
        b_rows = [r for r in deliveries(api) if r.owner == "owner-b"]
        assert not any(r.state == "Delivered" for r in b_rows)
    finally:
        stop_b.set()
        receiver.stop()
        silent.stop()
        api.close()
    print(
        f"\nFIGURES hostile owner: B {HOSTILE_HOOKS} silent hooks, {len(b_rows)} events pending, "
        f"{claimed_b} of B's claimed, {hanging} connections hanging; A's Finished {waited:.2f} s after its build"
    )


def claimed_now(api: RunningApi, owner: str) -> int:
    """The owner's rows some replica is sending now (a live claim)."""
    now = utcnow()
    return sum(
        1
        for r in deliveries(api)
        if r.owner == owner and r.claimed_until is not None and r.claimed_until > now
    )


def test_claims_take_turns_between_owners(database_url: str, receiver: Receiver) -> None:
    """B's 30 due rows are older than A's one; a round with room for two sends A's and B's oldest."""

    async def run() -> tuple[list[WebhookDeliveryRow], int]:
        db = Database(database_url)
        await db.migrate()
        try:
            past = utcnow() - timedelta(seconds=10)
            async with db.session() as s:
                for owner, hooks in (("owner-b", 3), ("owner-a", 1)):
                    for h in range(hooks):
                        s.add(
                            WebhookRow(
                                id=f"{owner}-{h}",
                                owner=owner,
                                payload_url=receiver.url,
                                secret=SECRET,
                                events=ALL_EVENTS,
                            )
                        )
                await s.flush()  # the hook first: the session orders inserts of unrelated classes by name
                for n in range(30):
                    s.add(_row(f"b{n:02}", f"owner-b-{n % 3}", "owner-b", past + timedelta(microseconds=n)))
                s.add(_row("a", "owner-a-0", "owner-a", past + timedelta(seconds=5)))
            worker = DeliveryWorker(db, _settings(batch_size=2), replica="r")
            try:
                sent = await worker.deliver_due()
            finally:
                await worker.stop()
            return await _rows(db), sent
        finally:
            await db.close()

    rows, sent = asyncio.run(run())
    delivered = {r.id for r in rows if r.state == "Delivered"}
    assert sent == 2
    assert delivered == {"a", "b00"}


def test_a_claim_outlives_a_slow_send_and_no_row_is_sent_twice(database_url: str) -> None:
    """Two workers on one database; every POST takes longer than the claim lease. Each worker renews
    its claims while it sends, so neither sends a row the other is sending (before, a batch of 7
    rows behind a slow receiver outlived the lease and a second replica sent the same rows)."""
    rows = 7
    receiver = Receiver(SECRET, delay_s=0.6).start()
    settings = _settings(claim_lease_s=0.4, hook_concurrency=1, timeout_s=30.0)  # a bound, not a speed

    async def run() -> list[WebhookDeliveryRow]:
        db = Database(database_url)
        await db.migrate()
        try:
            now = utcnow()
            async with db.session() as s:
                s.add(
                    WebhookRow(
                        id="slow", owner="o", payload_url=receiver.url, secret=SECRET, events=ALL_EVENTS
                    )
                )
                await s.flush()  # the hook first: the session orders inserts of unrelated classes by name
                for n in range(rows):
                    s.add(_row(f"d{n}", "slow", "o", now + timedelta(microseconds=n)))
            workers = [DeliveryWorker(db, settings, replica=name) for name in ("replica-a", "replica-b")]
            for worker in workers:
                await worker.start()
            try:
                deadline = time.monotonic() + 30
                while not all(r.state == "Delivered" for r in await _rows(db)):
                    assert time.monotonic() < deadline, "the rows were not all delivered"
                    await asyncio.sleep(0.05)
                await asyncio.sleep(1.0)  # a duplicate would be under way by now
            finally:
                for worker in workers:
                    await worker.stop()
            return await _rows(db)
        finally:
            await db.close()

    try:
        recorded = asyncio.run(run())
    finally:
        receiver.stop()
    bodies = [r.body for r in receiver.received]
    assert len(bodies) == len(set(bodies)) == rows, "a row was sent twice"
    assert all(r.attempts == 1 for r in recorded)
    assert receiver.max_concurrent == 1, "one hook's concurrency was exceeded"
    print(f"\nFIGURES slow receiver: {rows} rows, 0.6 s each, lease 0.4 s, 2 workers: sent {len(bodies)}")


def test_one_hook_gets_its_own_bounded_concurrency_and_each_builds_events_in_order(
    database_url: str,
) -> None:
    builds, concurrency = 6, 3
    receiver = Receiver(SECRET, delay_s=0.3).start()

    async def run() -> None:
        db = Database(database_url)
        await db.migrate()
        try:
            now = utcnow()
            async with db.session() as s:
                s.add(
                    WebhookRow(id="h", owner="o", payload_url=receiver.url, secret=SECRET, events=ALL_EVENTS)
                )
                await s.flush()  # the hook first: the session orders inserts of unrelated classes by name
                for n in range(builds):
                    for k, event in enumerate(ALL_EVENTS):
                        row = _row(f"d{n}-{k}", "h", "o", now + timedelta(microseconds=2 * n + k), event)
                        row.build_id = f"build-{n}"
                        row.body = f'{{"event":"{event}","build":"build-{n}"}}'
                        s.add(row)
            worker = DeliveryWorker(db, _settings(hook_concurrency=concurrency), replica="r")
            await worker.start()
            try:
                deadline = time.monotonic() + 30
                while len(receiver.received) < 2 * builds:
                    assert time.monotonic() < deadline, "not every event arrived"
                    await asyncio.sleep(0.05)
            finally:
                await worker.stop()
        finally:
            await db.close()

    try:
        asyncio.run(run())
    finally:
        receiver.stop()
    assert 2 <= receiver.max_concurrent <= concurrency
    order: dict[str, list[str]] = {}
    for r in receiver.received:
        order.setdefault(r.json["build"], []).append(r.json["event"])
    assert all(events == ALL_EVENTS for events in order.values()) and len(order) == builds


def test_hooks_per_owner_are_capped(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    api = RunningApi(hook_settings(tmp_path, database_url, max_hooks_per_owner=2))
    try:
        with client_of(api) as a, client_of(api, "owner-b") as b:
            register(a, receiver.url)
            register(a, receiver.url)
            refused = a.post(
                "/hooks", json={"payloadUrl": receiver.url, "secret": SECRET, "events": ALL_EVENTS}
            )
            assert refused.status_code == 400
            assert "at most 2 hooks" in refused.json()["message"]
            register(b, receiver.url)
            assert a.delete(f"/hooks/{a.get('/hooks').json()[0]['id']}").status_code == 200
            register(a, receiver.url)
    finally:
        api.close()


def test_settled_records_are_pruned_after_their_retention(tmp_path: Path, database_url: str) -> None:
    day = timedelta(days=1)
    settings = hook_settings(
        tmp_path, database_url, delivered_retention_s=day.total_seconds(), failed_retention_s=3 * day.total_seconds(),
        prune_interval_s=0.1,
    )  # fmt: skip
    api = RunningApi(settings)
    try:
        with client_of(api) as client:
            hook = register(client, "http://127.0.0.1:9/never-called", ["TranslationBuildFinished"])
        assert api.service.services is not None
        db = api.service.services.db
        now = utcnow()
        ages = {
            ("delivered-old", "Delivered"): 2 * day,
            ("delivered-new", "Delivered"): day / 2,
            ("failed-old", "Failed"): 4 * day,
            ("failed-new", "Failed"): 2 * day,
            ("pending-old", "Pending"): 10 * day,
        }

        async def add() -> None:
            async with db.session() as s:
                for (row_id, state), age in ages.items():
                    row = _row(row_id, hook["id"], "owner-a", now - age)
                    row.state, row.last_attempt_at = state, now - age
                    row.next_attempt_at = now + day  # the pending row is not due: it stays as it is
                    s.add(row)

        api.run(add())
        wait_until(lambda: len(deliveries(api)) == 3, 10, "the old records pruned")
        assert {r.id for r in deliveries(api)} == {"delivered-new", "failed-new", "pending-old"}
        scrape = metrics_text(api.rest_url)
        assert sample(scrape, "serval_api_webhook_deliveries_pruned_total", state="Delivered") == 1
        assert sample(scrape, "serval_api_webhook_deliveries_pruned_total", state="Failed") == 1
    finally:
        api.close()


def test_an_echo_builds_events_are_pruned_a_retention_after_delivery(
    tmp_path: Path, database_url: str, receiver: Receiver
) -> None:
    api = RunningApi(hook_settings(tmp_path, database_url, delivered_retention_s=0.5, prune_interval_s=0.1))
    try:
        with client_of(api) as client:
            register(client, receiver.url)
            echo_build(client)
            receiver.wait_for(2)
            wait_until(lambda: deliveries(api) == [], 10, "the delivered records pruned")
    finally:
        api.close()


def _settings(**fields: float | int) -> WebhookSettings:
    base: dict[str, object] = {
        "allowed_networks": ["127.0.0.0/8"],
        "retry_base_s": 0.05,
        "poll_interval_s": 0.05,
        "timeout_s": 2.0,
    }
    return WebhookSettings.model_validate({**base, **fields})


def _row(
    row_id: str, hook_id: str, owner: str, created: object, event: str = "TranslationBuildStarted"
) -> WebhookDeliveryRow:
    return WebhookDeliveryRow(
        id=row_id,
        hook_id=hook_id,
        owner=owner,
        event=event,
        body=f'{{"event":"{event}","id":"{row_id}"}}',
        created_at=created,
        next_attempt_at=created,
    )


async def _rows(db: Database) -> list[WebhookDeliveryRow]:
    async with db.session() as s:
        return list((await s.scalars(select(WebhookDeliveryRow).order_by(WebhookDeliveryRow.id))).all())
