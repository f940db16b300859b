"""A node killed with SIGKILL under load: two real node processes behind an in-process API
service while clients translate continuously (a bounded number of requests); the node serving the
engine is killed mid-run. No request fails: work in flight on the dead node is retried on the
other, which loads the revision on demand within the requests' deadline."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from serval.inference.v1 import node_pb2
from serval_api.service.keys import create_node_token
from serval_cli import processes
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.test_hot_swap import publish_and_complete
from tests.e2e.test_translate_path import VERSE

CLIENTS = 4
REQUESTS = 240
"""In all, across the clients; the kill comes after a third of them."""


def start_node(api: RunningApi, tmp_path: Path, token: str, name: str) -> subprocess.Popen[bytes]:
    """A node with a cache of its own, reading the API service's model store."""
    store = (api.service.settings.home / "store").resolve().as_uri()
    return processes.start(
        ["node", "--home", str(tmp_path / name), "--api-address", api.grpc_target, "--node-id", name],
        tmp_path / f"{name}.log",
        {"SERVAL_NODE__TOKEN": token, "SERVAL_STORE__URL": store},
    )


def serving_node(api: RunningApi, location: str) -> str:
    """The node holding `location` ready, as the API service's routing sees it."""
    assert api.service.services is not None
    registry = api.service.services.dispatcher.registry  # type: ignore[attr-defined]
    [node_id] = [
        s.node_id for s in registry.sessions() if s.model_state(location) == node_pb2.MODEL_STATE_READY
    ]
    return str(node_id)


@pytest.mark.sqlite_pass_only
def test_killing_one_of_two_nodes_fails_no_request(
    api: RunningApi, tiny_ct2_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="serval_api.routing.request_routing")
    assert api.service.services is not None
    _, token = api.run(create_node_token(api.service.services.db, "failover"))
    nodes = {name: start_node(api, tmp_path, token, name) for name in ("node-a", "node-b")}
    client = api.client()
    try:
        engine_id = create_engine(client)["id"]
        publish_and_complete(api, client, engine_id, tiny_ct2_model)
        health = processes.RestClient(api.rest_url, api.api_key())
        for node in nodes.values():
            health.wait_for_node(node)
        url = f"/translation/engines/{engine_id}/translate"
        assert client.post(url, json=VERSE, timeout=60).status_code == 200

        sent = 0
        lock = threading.Lock()
        outcomes: list[tuple[int, float]] = []

        def run_client() -> None:
            nonlocal sent
            with api.client() as own:
                while True:
                    with lock:
                        if sent >= REQUESTS:
                            return
                        sent += 1
                    began = time.monotonic()
                    status = own.post(url, json=VERSE, timeout=60).status_code
                    outcomes.append((status, time.monotonic() - began))

        threads = [threading.Thread(target=run_client) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        while len(outcomes) < REQUESTS // 3:
            time.sleep(0.01)
        serving = serving_node(api, f"models/{engine_id}/1")
        killed_at = time.monotonic()
        os.kill(nodes[serving].pid, signal.SIGKILL)
        for thread in threads:
            thread.join(120)

        failed = [status for status, _ in outcomes if status != 200]
        slowest = max(seconds for _, seconds in outcomes)
        retried = sum("went away with work in flight" in r.getMessage() for r in caplog.records)
        print(
            f"{len(outcomes)} requests, {len(failed)} failed, {retried} retried, slowest {slowest:.2f} s, "
            f"{time.monotonic() - killed_at:.1f} s from the kill to the last answer"
        )
        assert len(outcomes) == REQUESTS
        assert failed == []
        after = client.post(url, json=VERSE, timeout=60)
        assert after.status_code == 200, "the surviving node serves on"
    finally:
        client.close()
        for name, node in nodes.items():
            processes.stop(node)
            print(name, (tmp_path / f"{name}.log").read_text()[-1500:])
