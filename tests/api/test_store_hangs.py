"""A model store that is down or hangs fails as Serval's does and takes nothing else down with it.

The store is real S3 (the session's moto server) until a test turns it into one of two outages,
both on loopback: a refused port (nothing listens) or a black hole (`Silent`: it accepts every
connection, reads what is sent and never answers, as an endpoint whose replies are lost). The S3
client's bounds are short here (`STORE`), so a hung call ends in a few seconds, not minutes.

- A build started meanwhile is accepted (201), as Serval's `UseMissingAWSAsync` expects, and
  ends Faulted with a message that names the model store and what to check, and leaks nothing.
- Health probes hammering a hung store make one store call between them (shared, then reused),
  on the store's own threads; meanwhile another owner's translate, build start and webhooks, and
  the default executor every other blocking call uses, go on answering promptly.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from google.protobuf import empty_pb2

from serval.health.v1 import health_pb2, health_pb2_grpc
from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES, READ_STATUS
from serval_api.service import status
from serval_api.service.store_calls import SharedCheck
from serval_common.settings import ApiSettings, Settings, StoreSettings, WebhookSettings
from serval_common.store import StoreUnavailable, open_store, store_from_settings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.webhook_receiver import Receiver, Silent
from tests.helpers import free_port

PREFIX = "hung-store-prefix"
ACCESS_KEY = "AKIAHUNGSTORE0000000"
SECRET_KEY = "hung-store-secret-key-never-shown"
HOOK_SECRET = "hook-secret"
STORE = {"s3_connect_timeout_s": 1.0, "s3_read_timeout_s": 3.0, "s3_max_attempts": 2}
"""A hung store call gives up after 2 attempts of 3 s (and a backoff of up to 1 s between)."""
HUNG_CALL_S = 2 * 3.0 + 1
PROBES = 40
"""Concurrent health probes (half REST, half gRPC), each asking twice."""
STORE_MESSAGE = "the model store could not be reached ("
ADVICE = "check that the model store is up and that the API service reaches it"
OUTAGES = ("refused", "black-hole")


@pytest.fixture(params=OUTAGES)
def outage(request: pytest.FixtureRequest) -> Iterator[tuple[str, Silent | None]]:
    """(the S3 endpoint of the outage, the black hole when it is one)."""
    if request.param == "refused":
        yield f"http://127.0.0.1:{free_port()}", None
        return
    hole = Silent().start()
    try:
        yield f"http://127.0.0.1:{hole.port}", hole
    finally:
        hole.stop()


@pytest.fixture
def s3_api(tmp_path: Path, database_url: str, moto_endpoint: str, s3_bucket: str) -> Iterator[RunningApi]:
    """An API service on a real S3 store with short client bounds, two store threads and webhooks
    allowed to loopback."""
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        store=StoreSettings(
            url=f"s3://{s3_bucket}/{PREFIX}",
            s3_endpoint_url=moto_endpoint,
            s3_region="us-east-1",
            s3_access_key_id=ACCESS_KEY,
            s3_secret_access_key=SECRET_KEY,
            **STORE,
        ),
        api=ApiSettings(
            host="127.0.0.1", grpc_port=0, rest_port=0, store_sweep_interval_s=0, store_threads=2
        ),
        webhooks=WebhookSettings(
            allowed_networks=["127.0.0.0/8"], retry_base_s=0.05, poll_interval_s=0.1, timeout_s=30.0
        ),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def go_dark(api: RunningApi, endpoint: str) -> None:
    """From now on the service's store is the outage at `endpoint`."""
    services = api.service.services
    assert services is not None
    services.settings.store.s3_endpoint_url = endpoint
    services.store = store_from_settings(services.settings)


def engine_with_drafts(client: httpx.Client, engine_type: str = "nmt") -> tuple[str, str, str]:
    """An engine whose build writes a pretranslate file to the store: (engine id, its parallel
    corpus's id, the id of the file in it)."""
    engine = create_engine(client, engine_type)
    upload = {
        "data": {"format": "Text", "name": "MAT.txt"},
        "files": {"file": ("MAT.txt", b"In the beginning.\n")},
    }
    file = client.post("/files", **upload)  # type: ignore[arg-type]
    assert file.status_code == 201, file.text
    corpus = client.post("/corpora", json={"language": "en", "files": [{"fileId": file.json()["id"]}]})
    assert corpus.status_code == 201, corpus.text
    pc = client.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={"sourceCorpusIds": [corpus.json()["id"]], "targetCorpusIds": []},
    )
    assert pc.status_code == 201, pc.text
    return str(engine["id"]), str(pc.json()["id"]), str(file.json()["id"])


def drafts_build(pc_id: str) -> dict[str, Any]:
    return {"trainOn": [], "pretranslate": [{"parallelCorpusId": pc_id}]}


def assert_store_fault(build: dict[str, Any], what: str, *secrets: str) -> None:
    assert build["state"] == "Faulted", build
    message = build["message"]
    assert message.startswith(f"{STORE_MESSAGE}{what}): {ADVICE}"), message
    assert "store.url" in message and "store.s3_endpoint_url" in message and "(error id " in message
    for secret in (PREFIX, ACCESS_KEY, SECRET_KEY, "s3://", *secrets):
        assert secret not in message, secret


def test_a_build_started_while_the_store_is_down_is_accepted_and_faults(
    s3_api: RunningApi, outage: tuple[str, Silent | None], s3_bucket: str
) -> None:
    endpoint, _ = outage
    hidden = (s3_bucket, endpoint.removeprefix("http://"))
    with s3_api.client(scopes=ALL_SCOPES) as client:
        drafts, pc_id, file_id = engine_with_drafts(client)
        named = create_engine(client)["id"]
        by_grpc = create_engine(client)["id"]
        go_dark(s3_api, endpoint)

        started = client.post(f"/translation/engines/{drafts}/builds", json=drafts_build(pc_id))
        assert started.status_code == 201, started.text
        assert (started.json()["state"], started.json()["revision"]) == ("Pending", 1)
        ended = wait_for_build(client, started.json())
        assert_store_fault(ended, "the build's files could not be written", *hidden)

        # Nor can a base model be looked up: the build is accepted all the same, and faults.
        answer = client.post(
            f"/translation/engines/{named}/builds", json={"options": {"baseModel": "nllb-x"}}
        )
        assert answer.status_code == 201, answer.text
        assert_store_fault(
            wait_for_build(client, answer.json()), "the base model could not be checked", *hidden
        )

        # gRPC's StartBuild (what Serval calls on its engine) as well: the same path as REST's once
        # the request is read, so a refused store shows it (a hung one only waits longer).
        if outage[1] is not None:
            return
        source = engine_pb2.MonolingualCorpus(
            id="s",
            language="en",
            pretranslate_all=True,
            files=[engine_pb2.CorpusFile(location=f"files/{file_id}", format=engine_pb2.FILE_FORMAT_TEXT)],
        )
        engine_pb2_grpc.TranslationEngineApiStub(s3_api.channel).StartBuild(
            engine_pb2.StartBuildRequest(
                engine_type="Nmt",
                engine_id=by_grpc,
                build_id="b" * 24,
                corpora=[engine_pb2.ParallelCorpus(id="drafts", source_corpora=[source])],
            ),
            metadata=(("x-api-key", client.headers["X-API-Key"]),),
        )
        build = client.get(f"/translation/engines/{by_grpc}/builds/{'b' * 24}").json()
        assert_store_fault(wait_for_build(client, build), "the build's files could not be written", *hidden)


class Probes:
    """`PROBES` threads asking the health check over and over, half over REST and half over gRPC,
    until stopped (or `ROUNDS` each): what each answered and how long it took."""

    ROUNDS = 6
    PAUSE_S = 0.25
    """Between a probe's answer and its next ask, as an orchestrator's probes wait between them."""

    def __init__(self, api: RunningApi) -> None:
        self._url = f"{api.rest_url}/api/v1/status/health"
        self._headers = {"X-API-Key": api.api_key("prober", (READ_STATUS,))}
        self._health = health_pb2_grpc.HealthApiStub(api.channel)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.answers: list[tuple[str, float]] = []
        self._pool = ThreadPoolExecutor(PROBES)
        self._runs = [self._pool.submit(self._probe, i) for i in range(PROBES)]

    def _probe(self, i: int) -> None:
        for _ in range(self.ROUNDS):
            if self._stop.is_set():
                return
            started = time.monotonic()
            if i % 2:
                answer = httpx.get(self._url, headers=self._headers, timeout=60)
                store = answer.json()["results"]["modelStore"]
                outcome = f"{answer.status_code} {store['status']}"
            else:
                reply = self._health.HealthCheck(empty_pb2.Empty(), timeout=60)
                outcome = f"{health_pb2.HealthCheckStatus.Name(reply.status)} {reply.data['modelStore']}"
            with self._lock:
                self.answers.append((outcome, time.monotonic() - started))
            self._stop.wait(self.PAUSE_S)

    def rounds_done(self) -> int:
        with self._lock:
            return len(self.answers) // PROBES

    def stop(self) -> list[tuple[str, float]]:
        self._stop.set()
        self._pool.shutdown(wait=True)
        for run in self._runs:
            run.result()
        return self.answers


def wait_until(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.05)


def test_probes_hammering_a_hung_store_stall_no_other_tenant(
    s3_api: RunningApi, outage: tuple[str, Silent | None]
) -> None:
    endpoint, hole = outage
    receiver = Receiver(HOOK_SECRET).start()
    probes: Probes | None = None
    with contextlib.ExitStack() as stack:
        stack.callback(receiver.stop)
        a = stack.enter_context(s3_api.client("owner-a", ALL_SCOPES))
        b = stack.enter_context(s3_api.client("owner-b", ALL_SCOPES))
        # Owner B: an echo engine built while the store was up, and a webhook.
        hook = {"payloadUrl": receiver.url, "secret": HOOK_SECRET, "events": ["TranslationBuildStarted"]}
        assert b.post("/hooks", json=hook).status_code == 201
        echo = create_engine(b, "echo")["id"]
        first = b.post(f"/translation/engines/{echo}/builds", json={})
        assert wait_for_build(b, first.json())["state"] == "Completed"
        receiver.wait_for(1)
        # Owner A: engines whose builds write to the store.
        drafts = [engine_with_drafts(a) for _ in range(3)]
        go_dark(s3_api, endpoint)

        # The probes flood the hung store: between them, one store call.
        probes = Probes(s3_api)
        stack.callback(probes.stop)
        wait_until(lambda: probes.rounds_done() >= 1, status.CHECK_TIMEOUT_S + HUNG_CALL_S)
        if hole is not None:
            assert hole.accepted <= STORE["s3_max_attempts"], "more than one store call for the probes"

        # Owner A's builds hold the store's threads (and queue for them) until the store gives up.
        with ThreadPoolExecutor(len(drafts)) as builds:
            started = [
                builds.submit(a.post, f"/translation/engines/{engine}/builds", json=drafts_build(pc))
                for engine, pc, _ in drafts
            ]
            time.sleep(0.3)

            # Meanwhile owner B translates, starts a build and hears of it, and the default
            # executor answers: all before owner A's store calls give up (causal, not timed).
            answer = b.post(f"/translation/engines/{echo}/translate", json="In the beginning")
            assert answer.status_code == 200, answer.text
            assert answer.json()["translation"] == "In the beginning"
            answer = b.post(f"/translation/engines/{echo}/builds", json={})
            assert answer.status_code == 201, answer.text
            receiver.wait_for(2, timeout_s=60)
            assert receiver.received[-1].json["payload"]["build"]["id"] == answer.json()["id"]
            s3_api.run(asyncio.wait_for(asyncio.to_thread(int), 60))
            if hole is not None:
                assert not any(build.done() for build in started), (
                    "owner B waited for owner A's hung store calls"
                )

            for build in started:
                response = build.result()
                assert response.status_code == 201, response.text
        for build in (response.json() for response in (b.result() for b in started)):
            ended = wait_for_build(a, build)
            assert ended["state"] == "Faulted" and ended["message"].startswith(STORE_MESSAGE), ended

        answers = probes.stop()
    assert len(answers) >= PROBES
    outcomes = {outcome for outcome, _ in answers}
    assert outcomes <= {"503 Unhealthy", "UNHEALTHY Unhealthy"}, outcomes


def test_a_black_holed_store_call_ends_within_its_bounds() -> None:
    """The S3 client's timeouts and attempts bound a call to an endpoint that never answers."""
    hole = Silent().start()
    try:
        store = open_store(
            "s3://models/serval",
            endpoint_url=f"http://127.0.0.1:{hole.port}",
            region="us-east-1",
            access_key_id="test",
            secret_access_key="test",
            connect_timeout_s=1.0,
            read_timeout_s=0.5,
            max_attempts=2,
        )
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.exists("health/probe")
        assert time.monotonic() - started < 30, "bounded far below botocore's defaults (5 × 60 s)"
        assert hole.accepted == 2, "two attempts, each on a connection of its own"
    finally:
        hole.stop()


def test_the_store_settings_reach_the_s3_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVAL_STORE__URL", "s3://models/serval")
    monkeypatch.setenv("SERVAL_STORE__S3_CONNECT_TIMEOUT_S", "2.5")
    monkeypatch.setenv("SERVAL_STORE__S3_READ_TIMEOUT_S", "12")
    monkeypatch.setenv("SERVAL_STORE__S3_MAX_ATTEMPTS", "4")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    config = cast(Any, store_from_settings(Settings()))._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.5, 12.0)
    assert config.retries == {"total_max_attempts": 4, "mode": "standard"}
    defaults = StoreSettings()
    assert (defaults.s3_connect_timeout_s, defaults.s3_read_timeout_s, defaults.s3_max_attempts) == (
        5.0,
        10.0,
        3,
    )


def test_concurrent_checks_share_one_run_and_reuse_its_outcome() -> None:
    calls = 0

    async def failing() -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.2)
        raise StoreUnavailable("down")

    async def scenario() -> None:
        shared = SharedCheck(ttl_s=0.5)
        # A caller that gives up early (its own timeout) leaves the run going for the others.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(shared(failing), 0.01)
        outcomes = await asyncio.gather(*(shared(failing) for _ in range(50)), return_exceptions=True)
        assert all(isinstance(o, StoreUnavailable) for o in outcomes) and calls == 1
        with pytest.raises(StoreUnavailable):
            await shared(failing)
        assert calls == 1, "the outcome reused"
        await asyncio.sleep(0.6)
        with pytest.raises(StoreUnavailable):
            await shared(failing)
        assert calls == 2, "asked again once the outcome is older than ttl_s"

    asyncio.run(scenario())
