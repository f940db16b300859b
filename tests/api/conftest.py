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

from serval_api.app import ApiService
from serval_api.auth import ALL_ENGINE_SCOPES
from serval_api.builds.launcher import JobLauncher, JobSpec
from serval_api.service.keys import create_api_key
from serval_common.settings import ApiSettings, Settings

T = TypeVar("T")

MAX_SEGMENT_CHARS = 200
LONG_POLL_MAX_S = 1.0
RUN_TIMEOUT_S = 90
"""How long a test waits for the service's event loop; generous, since both passes of `make test`
and their node and job processes share two cores."""


class RecordingLauncher(JobLauncher):
    """Launching real build jobs is tested elsewhere; here a job is whatever the test reports."""

    def __init__(self) -> None:
        self.specs: list[JobSpec] = []
        self.canceled: list[str] = []

    async def launch(self, spec: JobSpec) -> str:
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

    def api_key(self, owner: str = "owner-a", scopes: tuple[str, ...] = ALL_ENGINE_SCOPES) -> str:
        assert self.service.services is not None
        _, plaintext = self.run(create_api_key(self.service.services.db, owner, scopes))
        return plaintext

    def client(self, owner: str = "owner-a", scopes: tuple[str, ...] = ALL_ENGINE_SCOPES) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.rest_url}/api/v1", headers={"X-API-Key": self.api_key(owner, scopes)}, timeout=10
        )

    def close(self) -> None:
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
