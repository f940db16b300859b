"""Admin control of real node processes under load: the serving node is drained while clients
translate (no request fails; the other node takes the engine), `serval admin nodes …` shows and
controls the fleet, and revoking a node's token stops that node."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from serval_api.auth import ADMIN
from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_cli.main import app
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.test_hot_swap import publish_and_complete
from tests.e2e.test_node_failover import start_node
from tests.e2e.test_translate_path import VERSE
from tests.helpers import Load, wait_until

CLIENTS = 3
REQUESTS = 150
"""In all, across the clients; the drain comes after a third of them."""


def ready_holders(nodes: list[dict[str, Any]], location: str) -> set[str]:
    return {
        node["id"]
        for node in nodes
        for model in node.get("models", [])
        if f"models/{model['engineId']}/{model['revision']}" == location and model["state"] == "ready"
    }


@pytest.mark.sqlite_pass_only
def test_draining_the_serving_node_under_load_fails_no_request(
    api: RunningApi, tiny_ct2_model: Path, tmp_path: Path
) -> None:
    assert api.service.services is not None
    token_record, token = api.run(create_node_token(api.service.services.db, "pool"))
    nodes = {name: start_node(api, tmp_path, token, name) for name in ("node-a", "node-b")}
    client = api.client()
    admin = api.client("ops", (ADMIN,))
    cli = ["--url", api.rest_url, "--api-key", api.api_key("ops", (ADMIN,))]
    runner = CliRunner()
    try:
        engine_id = create_engine(client)["id"]
        publish_and_complete(api, client, engine_id, tiny_ct2_model)
        health = processes.RestClient(api.rest_url, api.api_key())
        for node in nodes.values():
            health.wait_for_node(node)
        # The health check counts any connected node: wait until both are.
        wait_until(
            lambda: (
                {n["id"] for n in admin.get("/admin/nodes").json() if n["status"] == "serving"} >= set(nodes)
            ),
            60,
            "both nodes connected",
        )
        url = f"/translation/engines/{engine_id}/translate"
        location = f"models/{engine_id}/1"
        assert client.post(url, json=VERSE, timeout=60).status_code == 200
        [serving] = ready_holders(admin.get("/admin/nodes").json(), location)
        other = next(name for name in nodes if name != serving)

        listed = runner.invoke(app, ["admin", "nodes", "list", *cli])
        assert listed.exit_code == 0, listed.output
        assert (
            "node-a" in listed.output
            and "node-b" in listed.output
            and f"{engine_id}/1 ready" in listed.output
        )

        clients = [api.client() for _ in range(CLIENTS)]
        statuses: list[int] = []

        def send(thread: int, _index: int) -> None:
            statuses.append(clients[thread].post(url, json=VERSE, timeout=60).status_code)

        load = Load(send, total=REQUESTS, threads=CLIENTS).start()
        while len(statuses) < REQUESTS // 3:
            time.sleep(0.01)
        drained_at = time.monotonic()
        drained = runner.invoke(app, ["admin", "nodes", "drain", serving, "--reason", "maintenance", *cli])
        assert drained.exit_code == 0, drained.output
        load.join(120)
        for own in clients:
            own.close()
        failed = [status for status in statuses if status != 200]
        print(
            f"drain under load: {len(statuses)} requests, {len(failed)} failed, "
            f"{time.monotonic() - drained_at:.1f} s from the drain to the last answer"
        )
        assert len(statuses) == REQUESTS and failed == []
        after = {node["id"]: node for node in admin.get("/admin/nodes").json()}
        assert after[serving]["status"] == "draining" and after[serving]["drainReason"] == "maintenance"
        assert other in ready_holders(list(after.values()), location), "the other node took the engine"
        assert after[other]["memoryFreeBytes"] > 0 and after[other]["slots"] > 0

        assert runner.invoke(app, ["admin", "nodes", "undrain", serving, *cli]).exit_code == 0
        unloaded = runner.invoke(app, ["admin", "nodes", "unload", serving, engine_id, *cli])
        assert unloaded.exit_code == 0, unloaded.output
        loaded = runner.invoke(app, ["admin", "nodes", "load", other, engine_id, "--wait", "30", *cli])
        assert loaded.exit_code == 0 and f"{engine_id}/1 ready" in loaded.output, loaded.output

        revoked_at = time.monotonic()
        assert admin.delete(f"/admin/node-tokens/{token_record.id}").status_code == 200
        codes = [node.wait(30) for node in nodes.values()]
        print(f"token revoked: both nodes stopped {time.monotonic() - revoked_at:.2f} s later")
        assert codes == [2, 2], "a node whose token is revoked stops (exit code 2: rejected)"
    finally:
        client.close()
        admin.close()
        for name, node in nodes.items():
            processes.stop(node)
            print(name, (tmp_path / f"{name}.log").read_text()[-1500:])
