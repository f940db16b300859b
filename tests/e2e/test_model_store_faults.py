"""Model store faults under load: an in-process API service and a real inference node process,
both on an S3 model store served by moto in this process (stopped and restarted on the same port;
its objects survive), while clients translate through the REST API.

- The store stops while the node loads a new revision: every request is answered by the old
  revision, the node's failed attempts are visible in the API service's registry and in the
  node's metrics, and the new revision serves once the store is back.
- A new revision with a corrupted file: every request is answered by the old revision, the node
  reports the load FAILED with a checksum message, and a later intact revision still loads.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ctranslate2
import httpx
import pytest

from serval.inference.v1 import node_pb2
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeSession
from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_common.jobs import JobSpec
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import ApiSettings, Settings, StoreSettings
from serval_common.store import ModelStore, open_store
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.test_translate_path import VERSE
from tests.helpers import distinct_weights, free_port
from tests.test_model_store_faults import RestartableS3Server, corrupt

pytestmark = pytest.mark.sqlite_pass_only

BUCKET = "models"
STORE_URL = f"s3://{BUCKET}/serval"
CLIENTS = 2
REQUESTS = 100
"""Sent while the store is down (or the corrupt revision fails), across the clients."""
BOUND_S = 60.0
"""Only a bound, so that a broken build fails instead of hanging; nothing is timed against it."""


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RestartableS3Server]:
    """A restartable S3-protocol server with an empty bucket. The environment (credentials) is
    inherited by the node process; every store makes one attempt per call (`s3_max_attempts`), so
    that the node's own retries are what the tests see."""
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    server = RestartableS3Server()
    server.start()
    try:
        boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def api_on_s3(tmp_path: Path, database_url: str, s3_server: RestartableS3Server) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        store=StoreSettings(url=STORE_URL, s3_endpoint_url=s3_server.endpoint, s3_max_attempts=1),
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, heartbeat_interval_s=0.5),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


@dataclass
class Fleet:
    """The API service, its S3 model store, one node process and what the registry heard."""

    api: RunningApi
    s3: RestartableS3Server
    store: ModelStore
    node: subprocess.Popen[bytes]
    metrics_port: int
    engine_id: str
    statuses: list[node_pb2.ModelStatus] = field(default_factory=list)

    @property
    def registry(self) -> NodeRegistry:
        assert self.api.service.services is not None
        registry: NodeRegistry = self.api.service.services.dispatcher.registry  # type: ignore[attr-defined]
        return registry

    def session(self) -> NodeSession:
        [session] = self.registry.sessions()
        return session

    def location(self, revision: int) -> str:
        return f"models/{self.engine_id}/{revision}"

    def start_build(self, client: httpx.Client) -> JobSpec:
        """A build as the API service creates it (its training files go to the model store)."""
        assert client.post(f"/translation/engines/{self.engine_id}/builds", json={}).status_code == 201
        return self.api.launcher.specs[-1]

    def publish(self, spec: JobSpec, model_dir: Path) -> None:
        """Upload the revision's files and manifest, as the build job does."""
        manifest = Manifest(
            kind="model-revision",
            engine_id=self.engine_id,
            revision=spec.revision,
            build_id=spec.build_id,
            source_language="eng_Latn",
            target_language="swh_Latn",
            ctranslate2_version=ctranslate2.__version__,
            quantization="int8",
        )
        # Each revision its own weights, as a fine-tune's: none is an alias of another's loaded model.
        weights = distinct_weights(model_dir, f"{self.engine_id}-{spec.revision}")
        publish_folder(self.store, self.location(spec.revision), weights, manifest)

    def complete(self, spec: JobSpec) -> None:
        """The build job's completion report: the engine's revision moves on and nodes load ahead."""
        job = platform_pb2_grpc.TranslationPlatformApiStub(self.api.channel)
        metadata = (("authorization", f"Bearer {spec.job_token}"),)
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=metadata)
        job.BuildCompleted(
            platform_pb2.BuildCompletedRequest(build_id=spec.build_id, corpus_size=1, confidence=50.0),
            metadata=metadata,
        )

    def announced(self, revision: int, state: int) -> list[str]:
        """Messages of the node's model statuses the API service received for `revision`."""
        location = self.location(revision)
        return [s.message for s in list(self.statuses) if s.model.location == location and s.state == state]

    def scrape(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text


def metric(text: str, name: str, **labels: str) -> float:
    selector = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    match = re.search(rf"^{re.escape(name + selector)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name}{selector} missing from the node's /metrics"
    return float(match.group(1))


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


@pytest.fixture
def fleet(
    api_on_s3: RunningApi, s3_server: RestartableS3Server, tmp_path: Path, tiny_ct2_model: Path
) -> Iterator[tuple[Fleet, httpx.Client]]:
    """Revision 1 published to the S3 store and served by one node process."""
    api = api_on_s3
    assert api.service.services is not None
    _, token = api.run(create_node_token(api.service.services.db, "store-faults"))
    metrics_port = free_port()
    node = processes.start(
        [
            "node",
            "--home",
            str(tmp_path / "node"),
            "--api-address",
            api.grpc_target,
            "--node-id",
            "store-node",
        ],
        tmp_path / "node.log",
        {
            "SERVAL_NODE__TOKEN": token,
            "SERVAL_STORE__URL": STORE_URL,
            "SERVAL_STORE__S3_ENDPOINT_URL": s3_server.endpoint,
            "SERVAL_STORE__S3_MAX_ATTEMPTS": "1",
            "SERVAL_NODE__METRICS_PORT": str(metrics_port),
            "SERVAL_NODE__LOAD_RETRY_INITIAL_S": "0.2",
            "SERVAL_NODE__LOAD_RETRY_MAX_S": "1",
        },
    )
    client = api.client()
    try:
        engine_id = create_engine(client)["id"]
        store = open_store(STORE_URL, endpoint_url=s3_server.endpoint, max_attempts=1)
        fleet = Fleet(api, s3_server, store, node, metrics_port, engine_id)
        fleet.registry.listeners.append(lambda _session, status: fleet.statuses.append(status))
        first = fleet.start_build(client)
        fleet.publish(first, tiny_ct2_model)
        fleet.complete(first)
        processes.RestClient(api.rest_url, api.api_key()).wait_for_node(node)
        warm = client.post(f"/translation/engines/{engine_id}/translate", json=VERSE, timeout=60)
        assert warm.status_code == 200, warm.text
        assert warm.headers["X-Model-Revision"] == "1"
        yield fleet, client
    finally:
        client.close()
        s3_server.start()
        code = processes.stop(node)
        print((tmp_path / "node.log").read_text()[-2500:])
    assert code == 0, "the node drains and exits cleanly"


Outcome = tuple[int, str | None]
"""(HTTP status, X-Model-Revision) of one translate request."""


def translate_stream(
    api: RunningApi, url: str, *, total: int, until: Callable[[list[Outcome]], bool] | None = None
) -> list[list[Outcome]]:
    """CLIENTS threads translating one request after another: `total` requests in all, or, with
    `until`, until it holds for every thread's answers (at most `total` per thread)."""
    sent = 0
    lock = threading.Lock()
    outcomes: list[list[Outcome]] = [[] for _ in range(CLIENTS)]

    def run(index: int) -> None:
        nonlocal sent
        mine = outcomes[index]
        with api.client() as own:
            while True:
                if until is not None:
                    if until(mine) or len(mine) >= total:
                        return
                else:
                    with lock:
                        if sent >= total:
                            return
                        sent += 1
                response = own.post(url, json=VERSE, timeout=60)
                mine.append((response.status_code, response.headers.get("X-Model-Revision")))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND_S * 2)
    return outcomes


def api_retries(caplog: pytest.LogCaptureFixture) -> int:
    """Requests the API service retried on another node (a node went away or refused work)."""
    markers = ("went away with work in flight", "node refused work")
    return sum(any(m in r.getMessage() for m in markers) for r in caplog.records)


def test_store_outage_while_loading_keeps_the_old_revision_serving(
    fleet: tuple[Fleet, httpx.Client], tiny_ct2_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="serval_api.routing.request_routing")
    f, client = fleet
    url = f"/translation/engines/{f.engine_id}/translate"
    second = f.start_build(client)
    f.publish(second, tiny_ct2_model)
    f.s3.stop()
    stopped_at = time.monotonic()
    f.complete(second)

    retrying = node_pb2.MODEL_STATE_LOADING
    wait_until(lambda: len(f.announced(2, retrying)) >= 2, "the node announced a failed attempt")
    down = [o for thread in translate_stream(f.api, url, total=REQUESTS) for o in thread]
    wait_until(lambda: len(f.announced(2, retrying)) >= 3, "the node retried during the stream")

    assert len(down) == REQUESTS
    assert [o for o in down if o != (200, "1")] == [], "every request answered by revision 1"
    session = f.session()
    assert session.model_state(f.location(2)) == node_pb2.MODEL_STATE_LOADING
    visible = session.model_errors.get(f.location(2), "")
    assert visible.startswith("model store unavailable (attempt"), visible
    assert "next attempt in" in visible
    scraped = f.scrape()
    assert metric(scraped, "serval_node_model_load_failures_total", reason="store_unavailable") >= 2
    assert metric(scraped, "serval_node_model_loads_retrying") == 1
    attempts_while_down = len(
        [m for m in f.announced(2, retrying) if m.startswith("model store unavailable")]
    )

    f.s3.start()
    restarted_at = time.monotonic()
    first_new: list[float] = []

    def sees_revision_2(mine: list[Outcome]) -> bool:
        if mine and mine[-1][1] == "2":
            first_new.append(time.monotonic())
            return True
        return False

    after = translate_stream(f.api, url, total=2000, until=sees_revision_2)
    recovery_s = min(first_new) - restarted_at if first_new else float("nan")
    answers = [o for thread in after for o in thread]
    assert all(thread and thread[-1] == (200, "2") for thread in after), "revision 2 serves"
    assert [o for o in answers if o[0] != 200] == []
    for thread in after:
        revisions = [revision for _, revision in thread]
        switch = revisions.index("2")
        assert set(revisions[:switch]) <= {"1"} and set(revisions[switch:]) == {"2"}
    assert f.session().model_errors.get(f.location(2)) is None, "the retry message clears once ready"

    wait_until(lambda: metric(f.scrape(), "serval_node_revisions_loaded") == 1, "revision 1 unloaded")
    scraped = f.scrape()
    assert metric(scraped, "serval_node_model_loads_retrying") == 0
    assert metric(scraped, "serval_node_model_loads_failed_total", reason="store_unavailable") == 0
    failed_attempts = metric(scraped, "serval_node_model_load_failures_total", reason="store_unavailable")
    by_revision = Counter(revision for _, revision in [*down, *answers])
    print(
        f"store outage: {len(down) + len(answers)} requests sent, "
        f"{sum(o[0] != 200 for o in [*down, *answers])} failed, {api_retries(caplog)} retried by the API "
        f"service; answered by revision 1: {by_revision['1']}, by revision 2: {by_revision['2']}; "
        f"node load attempts failed: {failed_attempts:g} ({attempts_while_down} announced before the "
        f"restart); store down {restarted_at - stopped_at:.1f} s; revision 2 serving {recovery_s:.2f} s "
        "after the store restarted"
    )


def test_a_corrupt_revision_is_never_served_and_a_later_one_loads(
    fleet: tuple[Fleet, httpx.Client], tiny_ct2_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="serval_api.routing.request_routing")
    f, client = fleet
    url = f"/translation/engines/{f.engine_id}/translate"
    second = f.start_build(client)
    f.publish(second, tiny_ct2_model)
    corrupt(f.store, f"{f.location(2)}/model.bin")
    f.complete(second)
    during = [o for thread in translate_stream(f.api, url, total=REQUESTS // 2) for o in thread]
    wait_until(
        lambda: f.session().model_state(f.location(2)) == node_pb2.MODEL_STATE_FAILED,
        "the node reported revision 2 FAILED",
    )
    after_failure = [o for thread in translate_stream(f.api, url, total=REQUESTS // 2) for o in thread]

    outcomes = [*during, *after_failure]
    assert len(outcomes) == REQUESTS
    assert [o for o in outcomes if o != (200, "1")] == [], "every request answered by revision 1"
    error = f.session().model_errors[f.location(2)]
    assert f"{f.location(2)}/model.bin" in error and "checksum" in error, error
    assert len(f.announced(2, node_pb2.MODEL_STATE_FAILED)) == 1, "reported FAILED once, not retried"
    scraped = f.scrape()
    assert metric(scraped, "serval_node_model_loads_failed_total", reason="checksum") == 1
    assert metric(scraped, "serval_node_model_load_failures_total", reason="checksum") == 2

    third = f.start_build(client)
    f.publish(third, tiny_ct2_model)
    completed_at = time.monotonic()
    f.complete(third)
    first_new: list[float] = []

    def sees_revision_3(mine: list[Outcome]) -> bool:
        if mine and mine[-1][1] == "3":
            first_new.append(time.monotonic())
            return True
        return False

    later = [o for thread in translate_stream(f.api, url, total=2000, until=sees_revision_3) for o in thread]
    assert [o for o in later if o[0] != 200] == []
    assert {revision for _, revision in later} <= {"1", "3"}, "revision 2 never answers"
    assert later[-1] == (200, "3")
    assert f.session().model_state(f.location(3)) == node_pb2.MODEL_STATE_READY
    wait_until(
        lambda: f.location(2) not in f.session().model_errors,
        "revision 2's failure is forgotten once revision 3 supersedes it",
    )
    by_revision = Counter(revision for _, revision in [*outcomes, *later])
    print(
        f"corrupt revision: {len(outcomes) + len(later)} requests sent, "
        f"{sum(o[0] != 200 for o in [*outcomes, *later])} failed, {api_retries(caplog)} retried by the "
        f"API service; answered by revision 1: {by_revision['1']}, revision 2: {by_revision['2']}, "
        f"revision 3: {by_revision['3']}; revision 3 serving {min(first_new) - completed_at:.2f} s after "
        f"its build completed; node's error: {error}"
    )
