"""Webhooks: `/api/v1/hooks` and the outbox's deliveries to a real receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from serval.translation.v1 import platform_pb2
from serval_api.auth import ALL_SCOPES
from serval_api.db.models import WebhookDeliveryRow, WebhookRow, utcnow
from serval_api.webhooks.addresses import AddressPolicy
from serval_api.webhooks.outcomes import retry_delay_s
from serval_api.webhooks.sending import signature
from serval_common.settings import ApiSettings, Settings, WebhookSettings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.test_metrics import sample
from tests.api.test_platform_api import as_job, job_stub
from tests.api.webhook_receiver import Receiver, wait_until
from tests.helpers import TEST_DATABASE_URL, free_port, metrics_text

SECRET = "s3cret-never-shown"
ALL_EVENTS = ["TranslationBuildStarted", "TranslationBuildFinished"]


def hook_settings(home: Path, database_url: str, name: str = "replica-a", **webhooks: Any) -> Settings:
    fields: dict[str, Any] = {
        "allowed_networks": ["127.0.0.0/8"],
        "retry_base_s": 0.05,
        "poll_interval_s": 0.1,
        # A bound against a hung receiver, not a speed: on a loaded CI machine a loopback answer can
        # take seconds, and a timed-out first attempt would be a second one.
        "timeout_s": 30.0,
        **webhooks,
    }
    return Settings(
        home=home,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, instance_id=name),
        webhooks=WebhookSettings(**fields),
    )


@pytest.fixture
def hooked(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    running = RunningApi(hook_settings(tmp_path, database_url))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver(SECRET).start()
    try:
        yield started
    finally:
        started.stop()


def client_of(api: RunningApi, owner: str = "owner-a") -> httpx.Client:
    return api.client(owner, ALL_SCOPES)


def register(client: httpx.Client, url: str, events: list[str] | None = None) -> dict[str, Any]:
    body = {"payloadUrl": url, "secret": SECRET, "events": events or ALL_EVENTS}
    response = client.post("/hooks", json=body)
    assert response.status_code == 201, response.text
    hook: dict[str, Any] = response.json()
    return hook


def echo_build(client: httpx.Client, engine_id: str | None = None) -> tuple[str, str]:
    engine_id = engine_id or create_engine(client, "echo")["id"]
    response = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert response.status_code == 201, response.text
    assert wait_for_build(client, response.json())["state"] == "Completed"
    return engine_id, response.json()["id"]


def deliveries(api: RunningApi) -> list[WebhookDeliveryRow]:
    assert api.service.services is not None
    db = api.service.services.db

    async def read() -> list[WebhookDeliveryRow]:
        async with db.session() as s:
            query = select(WebhookDeliveryRow).order_by(WebhookDeliveryRow.created_at, WebhookDeliveryRow.id)
            return list((await s.scalars(query)).all())

    return api.run(read())


# ---- the REST resource ----------------------------------------------------------------------


def test_create_get_list_delete_owner_scoped(hooked: RunningApi) -> None:
    with client_of(hooked) as a, client_of(hooked, "owner-b") as b:
        created = a.post(
            "/hooks",
            json={"payloadUrl": "https://example.com/hook", "secret": SECRET, "events": ALL_EVENTS},
        )
        assert created.status_code == 201, created.text
        hook = created.json()
        assert set(hook) == {"id", "url", "payloadUrl", "events"}
        assert hook["payloadUrl"] == "https://example.com/hook"
        assert hook["events"] == ALL_EVENTS
        assert hook["url"].endswith(f"/api/v1/hooks/{hook['id']}")
        assert created.headers["Location"] == hook["url"]
        register(b, "https://example.org/b", ["TranslationBuildFinished"])

        listed = a.get("/hooks")
        assert listed.status_code == 200
        assert [h["id"] for h in listed.json()] == [hook["id"]]
        got = a.get(f"/hooks/{hook['id']}")
        assert (got.status_code, got.json()) == (200, hook)
        for response in (created, listed, got, b.get("/hooks")):
            assert SECRET not in response.text

        assert b.get(f"/hooks/{hook['id']}").status_code == 404
        assert b.delete(f"/hooks/{hook['id']}").status_code == 404
        assert len(b.get("/hooks").json()) == 1

        deleted = a.delete(f"/hooks/{hook['id']}")
        assert deleted.status_code == 200
        assert a.get(f"/hooks/{hook['id']}").status_code == 404
        assert a.delete(f"/hooks/{hook['id']}").status_code == 404
        assert a.get("/hooks").json() == []


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"payloadUrl": "ftp://example.com/x"}, "scheme"),
        ({"payloadUrl": "http:///no-host"}, "no host"),
        ({"payloadUrl": "example.com/hook"}, "scheme"),
        ({"payloadUrl": "https://user:pw@example.com/x"}, "credentials"),
        ({"payloadUrl": "https://example.com:99999/x"}, "valid URL"),
        ({"payloadUrl": "https://example.com/" + "a" * 2000}, "limit"),
        ({"payloadUrl": "http://127.0.0.1:8080/hook"}, "loopback"),
        ({"payloadUrl": "http://localhost/hook"}, "loopback"),
        ({"payloadUrl": "http://169.254.169.254/latest/meta-data"}, "link-local"),
        ({"payloadUrl": "http://10.1.2.3/hook"}, "private"),
        ({"payloadUrl": "http://192.168.0.10/hook"}, "private"),
        ({"payloadUrl": "http://[::1]/hook"}, "loopback"),
        ({"payloadUrl": "http://[fd00::1]/hook"}, "private"),
        ({"payloadUrl": "http://0.0.0.0/hook"}, "unspecified"),
        ({"payloadUrl": "http://224.0.0.1/hook"}, "multicast"),
        ({"secret": ""}, "secret"),
        ({"secret": "x" * 501}, "secret"),
        ({"events": ["BuildExploded"]}, "events"),
        ({"events": []}, "events"),
    ],
)
def test_invalid_configs_answer_400(api: RunningApi, config: dict[str, Any], why: str) -> None:
    body = {"payloadUrl": "https://example.com/hook", "secret": SECRET, "events": ALL_EVENTS, **config}
    with client_of(api) as client:
        response = client.post("/hooks", json=body)
        assert response.status_code == 400, response.text
        assert why in response.json()["message"]
        assert SECRET not in response.text
        assert client.get("/hooks").json() == []


def test_address_policy() -> None:
    refused = AddressPolicy()
    for address in ("127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "0.0.0.0"):
        assert refused.refuses(_ip(address)), address
    for address in ("::1", "fc00::1", "fe80::1", "::", "ff02::1", "::ffff:127.0.0.1", "224.0.0.251"):
        assert refused.refuses(_ip(address)), address
    for address in ("93.184.216.34", "2606:4700::1111", "8.8.8.8"):
        assert not refused.refuses(_ip(address)), address
    allowed = AddressPolicy(["127.0.0.0/8", "10.20.0.0/16"])
    assert not allowed.refuses(_ip("127.0.0.1"))
    assert not allowed.refuses(_ip("10.20.3.4"))
    assert allowed.refuses(_ip("10.21.3.4"))
    assert allowed.refuses(_ip("169.254.169.254"))


def _ip(text: str) -> Any:
    from ipaddress import ip_address

    return ip_address(text)


def test_settings_read_allowed_networks_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVAL_WEBHOOKS__ALLOWED_NETWORKS", '["10.20.0.0/16", "fd00::/8"]')
    monkeypatch.setenv("SERVAL_WEBHOOKS__RETRY_BASE_S", "0.5")
    settings = Settings()
    assert settings.webhooks.allowed_networks == ["10.20.0.0/16", "fd00::/8"]
    assert settings.webhooks.retry_base_s == 0.5


def test_retry_delays_follow_serval() -> None:
    delays = [retry_delay_s(n, 1.0) for n in range(1, 20)]
    assert delays[:11] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert delays[11:] == [2048] * 8
    assert retry_delay_s(3, 0.05) == pytest.approx(0.2)


# ---- deliveries -----------------------------------------------------------------------------


def test_echo_build_delivers_started_then_finished_signed(hooked: RunningApi, receiver: Receiver) -> None:
    other = Receiver(SECRET).start()
    try:
        with client_of(hooked) as client, client_of(hooked, "owner-b") as b:
            register(client, receiver.url)
            finished_only = Receiver(SECRET).start()
            try:
                register(client, finished_only.url, ["TranslationBuildFinished"])
                register(b, other.url)
                engine_id, build_id = echo_build(client)
                started, finished = receiver.wait_for(2)
                assert [r.json["event"] for r in finished_only.wait_for(1)] == ["TranslationBuildFinished"]
            finally:
                finished_only.stop()
        time.sleep(0.3)
        assert other.received == [], "another owner's hook heard of owner-a's build"
    finally:
        other.stop()
    assert all(r.valid for r in (started, finished))
    assert all(r.content_type == "application/json" for r in (started, finished))
    assert started.host == f"127.0.0.1:{receiver.port}"
    base = f"{hooked.rest_url}/api/v1/translation/engines/{engine_id}"
    links = {
        "build": {"id": build_id, "url": f"{base}/builds/{build_id}"},
        "engine": {"id": engine_id, "url": base},
    }
    assert started.json == {"event": "TranslationBuildStarted", "payload": links}
    body = finished.json
    date_finished = body["payload"].pop("dateFinished")
    assert body == {
        "event": "TranslationBuildFinished",
        "payload": {**links, "buildState": "Completed", "message": None},
    }
    assert datetime.fromisoformat(date_finished).utcoffset() == timedelta(0)
    assert started.signature == signature(SECRET, started.body)
    rows = deliveries(hooked)
    outcomes = {(r.state, r.attempts, r.last_status) for r in rows}
    assert outcomes == {("Delivered", 1, 200)}, [r.last_error for r in rows]
    assert len(rows) == 3, "two for the first hook, one for the Finished-only hook, none for owner-b's"


def test_platform_reports_deliver_started_and_faulted(hooked: RunningApi, receiver: Receiver) -> None:
    with client_of(hooked) as client:
        register(client, receiver.url)
        engine = create_engine(client)
        build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
        job = job_stub(hooked)
        time.sleep(0.3)
        assert receiver.received == [], "a Pending build is not started"
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=as_job(hooked))
        assert receiver.wait_for(1)[0].json["event"] == "TranslationBuildStarted"
        job.UpdateBuildStatus(
            platform_pb2.UpdateBuildStatusRequest(build_id=build["id"], step=3, progress=0.5),
            metadata=as_job(hooked),
        )
        job.BuildFaulted(
            platform_pb2.BuildFaultedRequest(build_id=build["id"], message="out of memory"),
            metadata=as_job(hooked),
        )
        finished = receiver.wait_for(2)[1].json
        assert finished["event"] == "TranslationBuildFinished"
        assert (finished["payload"]["buildState"], finished["payload"]["message"]) == (
            "Faulted",
            "out of memory",
        )

        second = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
        canceled = client.post(f"/translation/engines/{engine['id']}/current-build/cancel")
        assert canceled.status_code == 200
        third = receiver.wait_for(3)[2].json
        assert (third["event"], third["payload"]["build"]["id"], third["payload"]["buildState"]) == (
            "TranslationBuildFinished",
            second["id"],
            "Canceled",
        )
    time.sleep(0.3)
    assert len(receiver.received) == 3, "no other change is an event"


def test_failing_receiver_gets_the_delivery_after_retries(hooked: RunningApi) -> None:
    receiver = Receiver(SECRET, fail_first=3).start()
    try:
        with client_of(hooked) as client:
            register(client, receiver.url, ["TranslationBuildFinished"])
            echo_build(client)
            receiver.wait_for(1)
        wait_until(lambda: deliveries(hooked)[0].state == "Delivered", 5, "a recorded outcome")
    finally:
        receiver.stop()
    (row,) = deliveries(hooked)
    assert (row.state, row.attempts, row.last_status, row.last_error) == ("Delivered", 4, 200, None)
    assert receiver.failed == 3
    scrape = metrics_text(hooked.rest_url)
    assert sample(scrape, "serval_api_webhook_deliveries_total", outcome="failed_attempt") == 3
    assert sample(scrape, "serval_api_webhook_deliveries_total", outcome="delivered") == 1
    assert sample(scrape, "serval_api_webhook_backlog") == 0
    print(f"\nFIGURES retries: sent 1 event, delivered 1, failed attempts before it {receiver.failed}")


def test_delivery_gives_up_after_max_attempts(tmp_path: Path, database_url: str) -> None:
    api = RunningApi(hook_settings(tmp_path, database_url, max_attempts=3))
    receiver = Receiver(SECRET, fail_first=100).start()
    try:
        with client_of(api) as client:
            register(client, receiver.url, ["TranslationBuildFinished"])
            echo_build(client)
        wait_until(lambda: deliveries(api)[0].state == "Failed", 10, "the delivery given up")
        (row,) = deliveries(api)
        assert (row.attempts, row.last_status) == (3, 500)
        assert "HTTP 500" in (row.last_error or "")
        time.sleep(0.3)
        assert receiver.failed == 3 and receiver.received == []
        scrape = metrics_text(api.rest_url)
        assert sample(scrape, "serval_api_webhook_deliveries_total", outcome="gave_up") == 1
    finally:
        receiver.stop()
        api.close()


def test_refused_address_at_delivery_is_a_failed_attempt(api: RunningApi, receiver: Receiver) -> None:
    """The hook's host was allowed when it was registered, and is not any more (DNS rebinding, or
    the setting changed): the delivery is not sent."""
    assert api.service.services is not None
    db = api.service.services.db

    async def add_hook() -> None:
        async with db.session() as s:
            s.add(
                WebhookRow(
                    id="rebound", owner="owner-a", payload_url=receiver.url, secret=SECRET, events=ALL_EVENTS
                )
            )

    api.run(add_hook())
    with client_of(api) as client:
        echo_build(client)
    wait_until(lambda: all(r.attempts >= 1 for r in deliveries(api)), 5, "attempts")
    rows = deliveries(api)
    assert len(rows) == 2
    for row in rows:
        assert row.state == "Pending" and row.last_status is None
        assert row.last_error is not None and "refused" in row.last_error and "127.0.0.1" in row.last_error
    assert receiver.received == []


CLAIM_S = 2.0
"""How long the dead replica's claim in `test_lapsed_claim_of_a_dead_replica_is_delivered` lives."""


def test_lapsed_claim_of_a_dead_replica_is_delivered(hooked: RunningApi, receiver: Receiver) -> None:
    with client_of(hooked) as client:
        hook = register(client, receiver.url)
    assert hooked.service.services is not None
    db = hooked.service.services.db

    async def add_claimed() -> None:
        async with db.session() as s:
            s.add(
                WebhookDeliveryRow(
                    id="orphan",
                    hook_id=hook["id"],
                    owner="owner-a",
                    event="TranslationBuildStarted",
                    body='{"event":"TranslationBuildStarted","payload":{}}',
                    claimed_by="dead-replica/0",
                    claimed_until=utcnow() + timedelta(seconds=CLAIM_S),
                )
            )

    hooked.run(add_claimed())
    time.sleep(CLAIM_S / 4)  # the claim lives on for a while yet, even on a loaded machine
    assert receiver.received == [], "a live claim is the other replica's"
    assert receiver.wait_for(1)[0].body == b'{"event":"TranslationBuildStarted","payload":{}}'
    time.sleep(0.3)
    assert len(receiver.received) == 1


def test_backlog_survives_a_restart_delivered_once_each(tmp_path: Path, database_url: str) -> None:
    builds = 5
    port = free_port()
    receiver = Receiver(SECRET, port=port)
    settings = hook_settings(tmp_path, database_url)
    first = RunningApi(settings)
    try:
        with client_of(first) as client:
            register(client, receiver.url)
            for _ in range(builds):
                echo_build(client)
        wait_until(lambda: all(r.attempts >= 1 for r in deliveries(first)), 5, "a failed attempt each")
        failed_before = sum(r.attempts for r in deliveries(first))
    finally:
        first.close()
    pending = deliveries_of(settings)
    assert len(pending) == 2 * builds and all(r.state == "Pending" for r in pending)

    second = RunningApi(settings)
    receiver.start()
    try:
        received = receiver.wait_for(2 * builds, timeout_s=45)
        wait_until(lambda: all(r.state == "Delivered" for r in deliveries(second)), 15, "outcomes recorded")
        time.sleep(0.5)
        received = receiver.received
    finally:
        receiver.stop()
        second.close()
    bodies = [r.body for r in received]
    assert len(bodies) == 2 * builds, "an event was lost or delivered twice"
    assert len(set(bodies)) == 2 * builds
    assert all(r.valid for r in received)
    events_per_build: dict[str, list[str]] = {}
    for r in received:
        events_per_build.setdefault(r.json["payload"]["build"]["id"], []).append(r.json["event"])
    # Retries may reorder one build's events: each row retries on its own schedule.
    assert all(sorted(e) == sorted(ALL_EVENTS) for e in events_per_build.values())
    assert len(events_per_build) == builds
    print(
        f"\nFIGURES restart: sent {2 * builds} events, failed attempts before the restart {failed_before}, "
        f"delivered after it {len(set(bodies))}, duplicates {len(bodies) - len(set(bodies))}, "
        f"lost {2 * builds - len(set(bodies))}"
    )


def delivered_by(api: RunningApi) -> float:
    scrape = metrics_text(api.rest_url)
    return sample(scrape, "serval_api_webhook_deliveries_total", outcome="delivered") or 0.0


def deliveries_of(settings: Settings) -> list[WebhookDeliveryRow]:
    from serval_api.db.database import Database

    async def read() -> list[WebhookDeliveryRow]:
        db = Database(settings.resolved_database_url)
        try:
            async with db.session() as s:
                return list((await s.scalars(select(WebhookDeliveryRow))).all())
        finally:
            await db.close()

    return asyncio.run(read())


@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_URL),
    reason="replicas share one PostgreSQL database (run with scripts/postgres.sh run …)",
)
def test_two_replicas_deliver_each_event_exactly_once(tmp_path: Path, database_url: str) -> None:
    builds = 20
    receiver = Receiver(SECRET).start()
    a = RunningApi(hook_settings(tmp_path, database_url, "replica-a", batch_size=4))
    try:
        b = RunningApi(hook_settings(tmp_path, database_url, "replica-b", batch_size=4))
        try:
            with client_of(a) as client_a, client_of(b) as client_b:
                register(client_a, receiver.url)
                engines = [create_engine(c, "echo")["id"] for c in (client_a, client_b)]
                for i in range(builds):
                    echo_build((client_a, client_b)[i % 2], engines[i % 2])
            receiver.wait_for(2 * builds, timeout_s=20)
            wait_until(lambda: all(r.state == "Delivered" for r in deliveries(a)), 5, "outcomes recorded")
            time.sleep(0.5)
            by_a, by_b = (delivered_by(replica) for replica in (a, b))
        finally:
            b.close()
    finally:
        a.close()
        receiver.stop()
    bodies = [r.body for r in receiver.received]
    assert len(bodies) == len(set(bodies)) == 2 * builds
    assert by_a + by_b == 2 * builds
    print(
        f"\nFIGURES replicas: sent {2 * builds} events, delivered {len(set(bodies))}, "
        f"duplicates {len(bodies) - len(set(bodies))}; by replica A {by_a:.0f}, by B {by_b:.0f}"
    )


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_https_delivery_connects_to_the_checked_address_and_verifies_the_name(
    tmp_path: Path, database_url: str, trusted: bool
) -> None:
    """The worker connects to the address it resolved and checked, and still verifies the
    receiver's certificate against the URL's host name (sent as SNI)."""
    from serval_api.db.database import Database
    from serval_api.webhooks.delivery import DeliveryWorker
    from tests.test_tls import self_signed, trusting

    resolved = socket.getaddrinfo("localhost", 443, type=socket.SOCK_STREAM)
    if resolved[0][4][0] != "127.0.0.1":
        pytest.skip("localhost does not resolve to 127.0.0.1 first here")
    pem, stranger = name_only_cert(tmp_path, "localhost"), self_signed(tmp_path, "stranger")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(pem.cert, pem.key)
    receiver = Receiver(SECRET, tls=server_tls).start()
    url = f"https://localhost:{receiver.port}/hook"

    async def deliver() -> WebhookDeliveryRow:
        db = Database(database_url)
        await db.migrate()
        try:
            async with db.session() as s:
                s.add(WebhookRow(id="tls", owner="o", payload_url=url, secret=SECRET, events=ALL_EVENTS))
                await s.flush()  # the hook first: the session orders inserts of unrelated classes by name
                s.add(
                    WebhookDeliveryRow(
                        id="d", hook_id="tls", owner="o", event="TranslationBuildStarted", body="{}"
                    )
                )
            settings = WebhookSettings(allowed_networks=["127.0.0.0/8"], timeout_s=5)
            worker = DeliveryWorker(
                db, settings, replica="t", verify=trusting(pem.cert if trusted else stranger.cert)
            )
            try:
                assert await worker.deliver_due() == 1
            finally:
                await worker.stop()
            async with db.session() as s:
                row = await s.get(WebhookDeliveryRow, "d")
                assert row is not None
                return row
        finally:
            await db.close()

    try:
        row = asyncio.run(deliver())
    finally:
        receiver.stop()
    if trusted:
        assert (row.state, row.last_status) == ("Delivered", 200)
        (received,) = receiver.received
        assert received.valid and received.host == f"localhost:{receiver.port}"
    else:
        assert (row.state, row.attempts, row.last_status) == ("Pending", 1, None)
        assert "CERTIFICATE_VERIFY_FAILED" in (row.last_error or "")
        assert receiver.received == []


def name_only_cert(folder: Path, name: str) -> Any:
    """A self-signed certificate for the DNS name alone (no IP address): it verifies only when
    the client checks the name, not the address it connected to."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from tests.test_tls import Pem

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = Pem(folder / f"{name}-only.crt", folder / f"{name}-only.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return pem
