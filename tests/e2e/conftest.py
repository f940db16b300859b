"""The API service and an inference node as separate processes on loopback ports, over a model
store holding the tiny base model, exactly as `serval demo` runs them."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_common.settings import ApiSettings, Settings
from serval_common.store import ModelStore, open_store
from tests.api.conftest import RunningApi
from tests.e2e.browser import browser, watched  # noqa: F401 (fixtures for the page tests)
from tests.helpers import free_port, fresh_database, publish_tiny_base_model, wait_for_port

BASE_MODEL = "tiny-nllb"
MAX_SEGMENT_CHARS = 500


@dataclass
class Deployment:
    home: Path
    rest: httpx.Client
    channel: grpc.Channel
    api_key: str
    grpc_port: int
    api: subprocess.Popen[bytes]
    node: subprocess.Popen[bytes]
    database_url: str

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-api-key", self.api_key),)


@pytest.fixture(scope="session")
def e2e_database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database(tmp_path_factory.mktemp("database")) as url:
        yield url


@pytest.fixture(scope="session")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, tiny_ct2_model: Path, e2e_database_url: str
) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("home")
    store = open_store((home / "store").as_uri())
    publish_tiny_base_model(store, tiny_ct2_model, BASE_MODEL)
    api_key, node_token = create_credentials(Settings(home=home, database_url=e2e_database_url), "e2e")
    grpc_port, rest_port = free_port(), free_port()
    env = {"SERVAL_API__MAX_SEGMENT_CHARS": str(MAX_SEGMENT_CHARS), "SERVAL_DATABASE_URL": e2e_database_url}
    api = processes.start(
        ["api", "--home", str(home), "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
        home / "api.log",
        env,
    )
    node = processes.start(
        ["node", "--home", str(home), "--api-address", f"127.0.0.1:{grpc_port}", "--node-id", "e2e-node"],
        home / "node.log",
        {"SERVAL_NODE__TOKEN": node_token},
    )
    try:
        wait_for_port(rest_port, api)
        with (
            httpx.Client(
                base_url=f"http://127.0.0.1:{rest_port}/api/v1", headers={"X-API-Key": api_key}, timeout=60
            ) as rest,
            grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
        ):
            processes.RestClient(f"http://127.0.0.1:{rest_port}", api_key).wait_for_node(node)
            yield Deployment(home, rest, channel, api_key, grpc_port, api, node, e2e_database_url)
    finally:
        node_code = processes.stop(node)
        time.sleep(0.5)
        nodes_after_drain = node_statuses(e2e_database_url)
        api_code = processes.stop(api)
        print((home / "node.log").read_text()[-3000:], (home / "api.log").read_text()[-3000:])
    assert node_code == 0, "the node must drain and exit 0 on SIGTERM"
    assert nodes_after_drain == {"e2e-node": "gone"}, "a node that said goodbye is recorded as gone"
    assert api_code == 0


@pytest.fixture
def api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    """An in-process API service (builds played by the test through the platform API) whose
    nodes heartbeat every half second, for tests that run node processes against it."""
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, heartbeat_interval_s=0.5),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def node_statuses(database_url: str) -> dict[str, str]:
    from serval_api.db.database import Database
    from serval_api.db.nodes import list_nodes

    async def read() -> dict[str, str]:
        db = Database(database_url)
        try:
            return {n.id: n.status for n in await list_nodes(db)}
        finally:
            await db.close()

    return asyncio.run(read())


def admin_key(database_url: str) -> str:
    """A new administrator's API key of the deployment whose database is at `database_url`."""
    from serval_api.auth import ADMIN
    from serval_api.db.database import Database
    from serval_api.service.keys import create_api_key

    async def create() -> str:
        db = Database(database_url)
        try:
            _, key = await create_api_key(db, "ops", (ADMIN,))
            return key
        finally:
            await db.close()

    return asyncio.run(create())


def wait_for_build(
    rest: httpx.Client, engine_id: str, build: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Long-poll the build (as a client would) until it leaves Pending and Active."""
    deadline = time.monotonic() + timeout_s
    while build["state"] in ("Pending", "Active"):
        assert time.monotonic() < deadline, f"build stuck in {build['state']}: {build.get('message')}"
        poll = rest.get(
            f"/translation/engines/{engine_id}/builds/{build['id']}",
            params={"min-revision": build["revision"] + 1},
        )
        if poll.status_code == 200:
            build = poll.json()
        else:
            assert poll.status_code == 408, poll.text
    return build


@pytest.fixture
def store(api: RunningApi, tiny_ct2_model: Path) -> ModelStore:
    """The `api` fixture's model store, with the tiny base model published as `tiny-nllb`."""
    published = open_store((api.service.settings.home / "store").resolve().as_uri())
    publish_tiny_base_model(published, tiny_ct2_model, BASE_MODEL)
    return published


@pytest.fixture
def node_token(api: RunningApi) -> str:
    assert api.service.services is not None
    _, token = api.run(create_node_token(api.service.services.db, "e2e"))
    return token
