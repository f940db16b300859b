"""A real API service (gRPC + REST on 127.0.0.1, SQLite in tmp_path) running in a background
event loop, driven by ordinary synchronous clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.app import ApiService
from serval_api.auth import ALL_ENGINE_SCOPES, READ_STATUS
from serval_api.service.keys import create_api_key
from serval_api.service.launcher import JobLauncher
from serval_common.jobs import JobSpec
from serval_common.settings import ApiSettings, Settings
from tests.helpers import metrics_text

T = TypeVar("T")

MAX_SEGMENT_CHARS = 200
LONG_POLL_MAX_S = 1.0
RUN_TIMEOUT_S = 90
"""How long a test waits for the service's event loop; generous, since both passes of `make test`
and their node and job processes share two cores."""


class RecordingLauncher(JobLauncher):
    """Launching real build jobs is tested elsewhere; here a job is whatever the test reports.
    `refusal`, when set, is what the next launches raise (a launcher that refuses or breaks)."""

    def __init__(self) -> None:
        self.specs: list[JobSpec] = []
        self.canceled: list[str] = []
        self.refusal: Exception | None = None

    async def launch(self, spec: JobSpec) -> str:
        if self.refusal is not None:
            raise self.refusal
        self.specs.append(spec)
        return f"recorded:{spec.build_id}"

    async def cancel(self, build_id: str) -> None:
        self.canceled.append(build_id)

    def queue_depth(self) -> int:
        return 0

    async def close(self) -> None:
        pass


class RunningApi:
    def __init__(self, settings: Settings) -> None:
        self.launcher = RecordingLauncher()
        self.service = ApiService(settings, launcher=self.launcher, long_poll_max_s=LONG_POLL_MAX_S)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.run(self.service.start())
        self.rest_url = f"http://127.0.0.1:{self.service.rest_port}"
        self.grpc_target = f"127.0.0.1:{self.service.grpc_port}"
        self.channel = grpc.insecure_channel(self.grpc_target)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=RUN_TIMEOUT_S)

    def api_key(
        self, owner: str = "owner-a", scopes: tuple[str, ...] = (*ALL_ENGINE_SCOPES, READ_STATUS)
    ) -> str:
        """A key (by default with `read:status`, which `RestClient.wait_for_node` reads health with)."""
        assert self.service.services is not None
        _, plaintext = self.run(create_api_key(self.service.services.db, owner, scopes))
        return plaintext

    def wake_polls_only(self, limit_s: float = 120) -> None:
        """Long polls wait up to `limit_s` from now on, not `LONG_POLL_MAX_S`: for tests where a
        change must wake them, so that a slow machine cannot turn a wake into a 408."""
        assert self.service.services is not None
        self.service.services.long_poll_max_s = limit_s

    def long_polls_waiting(self) -> int:
        """The long polls waiting in the service now, as its `/metrics` gauge reports them."""
        for family in text_string_to_metric_families(metrics_text(self.rest_url)):
            if family.name == "serval_api_long_polls_waiting":
                return int(family.samples[0].value)
        raise AssertionError("/metrics has no serval_api_long_polls_waiting")

    def client(self, owner: str = "owner-a", scopes: tuple[str, ...] = ALL_ENGINE_SCOPES) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.rest_url}/api/v1", headers={"X-API-Key": self.api_key(owner, scopes)}, timeout=60
        )

    def close(self) -> None:
        """Stop the service (a test may, before its fixture does)."""
        if self.loop.is_closed():
            return
        self.channel.close()
        self.run(self.service.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@pytest.fixture
def api(tmp_path: Any, database_url: str) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, max_segment_chars=MAX_SEGMENT_CHARS),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def client(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client() as c:
        yield c


def create_engine(client: httpx.Client, engine_type: str = "nmt", **fields: Any) -> dict[str, Any]:
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "type": engine_type, **fields}
    response = client.post("/translation/engines", json=body)
    assert response.status_code == 201, response.text
    engine: dict[str, Any] = response.json()
    return engine


def job_metadata(job_token: str) -> tuple[tuple[str, str]]:
    """A build job's credentials on a platform API call."""
    return (("authorization", f"Bearer {job_token}"),)


def start_build(api: RunningApi, client: httpx.Client, **engine: str) -> tuple[str, str, str]:
    """An engine with a build its job reported started: (engine id, build id, job token)."""
    created = create_engine(client, **engine)
    assert client.post(f"/translation/engines/{created['id']}/builds", json={}).status_code == 201
    spec = api.launcher.specs[-1]
    platform = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    platform.BuildStarted(
        platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=job_metadata(spec.job_token)
    )
    return created["id"], spec.build_id, spec.job_token


def report_training(api: RunningApi, build_id: str, job_token: str, progress: float, step: int) -> None:
    """The build's job reports `progress` at training step `step` of 100 ("training step N")."""
    platform_pb2_grpc.TranslationPlatformApiStub(api.channel).UpdateBuildStatus(
        platform_pb2.UpdateBuildStatusRequest(
            build_id=build_id,
            step=step,
            progress=progress,
            message=f"training step {step}",
            phases=[platform_pb2.Phase(stage=platform_pb2.PHASE_STAGE_TRAIN, step=step, step_count=100)],
        ),
        metadata=job_metadata(job_token),
    )


def report_fault(api: RunningApi, build_id: str, job_token: str, message: str) -> None:
    """The build's job reports it faulted with `message`."""
    platform_pb2_grpc.TranslationPlatformApiStub(api.channel).BuildFaulted(
        platform_pb2.BuildFaultedRequest(build_id=build_id, message=message), metadata=job_metadata(job_token)
    )


FINAL_STATES = ("Completed", "Faulted", "Canceled")
MAX_POLLS = 200
"""Long polls `follow_build` makes before it gives up: a build that never ends fails the test."""


def follow_build(client: httpx.Client, build_url: str, build: dict[str, Any]) -> list[dict[str, Any]]:
    """Every revision of `build` a client sees that long-polls `build_url` with `min-revision` one
    past the last it saw, as Serval's clients do, from `build` (a start's answer) to its end."""
    seen = [build]
    for _ in range(MAX_POLLS):
        if seen[-1]["state"] in FINAL_STATES:
            return seen
        answer = client.get(build_url, params={"min-revision": seen[-1]["revision"] + 1})
        if answer.status_code == 408:
            continue
        assert answer.status_code == 200, answer.text
        seen.append(answer.json())
    raise AssertionError(f"build {build['id']} did not end: {[b['state'] for b in seen]}")


def wait_for_build(
    client: httpx.Client, build: dict[str, Any], engines: str = "/translation/engines"
) -> dict[str, Any]:
    """`build` (a start's answer) once it has ended; `engines` is its API's engine path."""
    url = f"{engines}/{build['engine']['id']}/builds/{build['id']}"
    return follow_build(client, url, build)[-1]
