"""Interactive learning never loses a pair, with real node processes serving a real Thot model:
a pair trained through a replica the node has no session with, and pairs trained while the
node's only API service was down and restarted, are learned by the node all the same, from the
database (the node reports the pair number its model has learned up to; a replica that finds the
engine's last pair numbered higher tells it to fetch the rest).

Learned means both: the node reports the engine's last pair number (admin API, `trainedThrough`),
and the model's translation of a trained verse it had never seen begins with the trained words."""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_api.auth import ADMIN
from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi
from tests.conftest import THOT_MODEL_PAIRS
from tests.e2e.nodes import smt_engine
from tests.helpers import TEST_DATABASE_URL, free_port, verse_pairs, wait_until

pytestmark = pytest.mark.database

SOURCES, TARGETS = verse_pairs("engwebp", "swh1850", THOT_MODEL_PAIRS + 20)
UNSEEN = list(zip(SOURCES[THOT_MODEL_PAIRS:], TARGETS[THOT_MODEL_PAIRS:], strict=True))
"""Verse pairs the model never trained on."""


def api_settings(home: Path, database_url: str, name: str, grpc_port: int = 0) -> Settings:
    return Settings(
        home=home,  # one model store for every replica
        database_url=database_url,
        api=ApiSettings(
            host="127.0.0.1",
            grpc_port=grpc_port,
            rest_port=0,
            instance_id=name,
            heartbeat_interval_s=0.5,
            request_timeout_s=60,
        ),
    )


class SmtNode:
    """A node process serving smt-transfer engines, dialing the given API addresses only."""

    def __init__(self, home: Path, token: str, name: str, addresses: list[str]) -> None:
        self.name = name
        self.metrics_port = free_port()
        self.process = processes.start(
            ["node", "--home", str(home / name), "--node-id", name]
            + [arg for address in addresses for arg in ("--api-address", address)],
            home / f"{name}.log",
            {
                "SERVAL_NODE__TOKEN": token,
                "SERVAL_NODE__FAMILIES": '["smt-transfer"]',
                "SERVAL_NODE__METRICS_PORT": str(self.metrics_port),
                "SERVAL_STORE__URL": (home / "store").resolve().as_uri(),
            },
        )
        self.log = home / f"{name}.log"

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        assert match, f"{name} missing from the node's metrics"
        return float(match.group(1))

    def stop(self) -> None:
        processes.stop(self.process)


def connected(api: RunningApi, node: SmtNode) -> None:
    def serving() -> bool:
        assert node.process.poll() is None, f"the node exited: {node.log.read_text()[-2000:]}"
        with api.client("ops", (ADMIN,)) as admin:
            answer = admin.get(f"/admin/nodes/{node.name}")
        return answer.status_code == 200 and answer.json()["status"] == "serving"

    wait_until(serving, 90, f"{node.name} connected", interval_s=0.2)


def node_models(api: RunningApi, node_id: str) -> dict[str, dict[str, Any]]:
    """The node's models as `api` sees them: location → model."""
    with api.client("ops", (ADMIN,)) as admin:
        answer = admin.get(f"/admin/nodes/{node_id}")
    if answer.status_code != 200 or answer.json().get("status") not in ("serving", "draining"):
        return {}
    return {f"models/{m['engineId']}/{m['revision']}": m for m in answer.json()["models"]}


def translate(client: httpx.Client, engine_id: str, segment: str) -> str:
    answer = client.post(f"/translation/engines/{engine_id}/translate", json=segment, timeout=90)
    assert answer.status_code == 200, answer.text
    translation: str = answer.json()["translation"]
    return translation


def train(client: httpx.Client, engine_id: str, source: str, target: str) -> None:
    answer = client.post(
        f"/translation/engines/{engine_id}/train-segment",
        json={"sourceSegment": source, "targetSegment": target, "sentenceStart": True},
        timeout=90,
    )
    assert answer.status_code == 200, answer.text


def last_pair(api: RunningApi, engine_id: str) -> int:
    assert api.service.services is not None
    from serval_api.service.train_segments import last_pairs

    return api.run(last_pairs(api.service.services.db, [engine_id]))[engine_id]


def learned_through(api: RunningApi, node: SmtNode, engine_id: str, seq: int) -> None:
    location = f"models/{engine_id}/1"
    wait_until(
        lambda: node_models(api, node.name).get(location, {}).get("trainedThrough") == seq,
        90,
        f"{node.name} learned pair {seq}",
        interval_s=0.2,
    )


def first_words(text: str, count: int = 3) -> list[str]:
    return [w.lower().strip(".,;:") for w in text.split()[:count]]


@pytest.fixture
def node_token_of() -> Any:
    def make(api: RunningApi) -> str:
        assert api.service.services is not None
        _, token = api.run(create_node_token(api.service.services.db, "learning"))
        return token

    return make


@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_URL),
    reason="two replicas share one PostgreSQL database (run with scripts/postgres.sh run …)",
)
def test_a_pair_trained_through_a_replica_the_node_has_no_session_with_is_learned(
    tmp_path: Path, database_url: str, thot_model: Path, node_token_of: Any
) -> None:
    a = RunningApi(api_settings(tmp_path, database_url, "replica-a"))
    b = RunningApi(api_settings(tmp_path, database_url, "replica-b"))
    node: SmtNode | None = None
    try:
        with a.client() as client_a, b.client() as client_b:
            engine_id = smt_engine(a, client_a, thot_model)
            node = SmtNode(tmp_path, node_token_of(a), "only-on-b", [b.grpc_target])
            connected(b, node)
            (source, target), (source2, target2) = UNSEEN[0], UNSEEN[1]
            before = translate(client_b, engine_id, source)  # loads the model on the node, through B
            assert first_words(before) != first_words(target)
            assert not node_models(a, node.name), "the node has no session with replica A"

            train(client_a, engine_id, source, target)  # reaches no node through A
            train(client_a, engine_id, source2, target2)
            learned_through(b, node, engine_id, last_pair(a, engine_id))
            assert first_words(translate(client_b, engine_id, source)) == first_words(target)
            assert first_words(translate(client_b, engine_id, source2)) == first_words(target2)
            assert node.metric("serval_node_train_segments_caught_up_total") == 2, "caught up, by CatchUp"
            assert node.metric("serval_node_model_load_seconds_count") == 1, "not by a reload's replay"

            (source3, target3) = UNSEEN[2]
            train(client_b, engine_id, source3, target3)  # pushed through B as work
            learned_through(b, node, engine_id, last_pair(a, engine_id))
            assert first_words(translate(client_b, engine_id, source3)) == first_words(target3)
    finally:
        if node is not None:
            node.stop()
            print(node.log.read_text()[-4000:])
        b.close()
        a.close()


def test_pairs_trained_while_the_api_service_restarted_are_learned(
    tmp_path: Path, database_url: str, thot_model: Path, node_token_of: Any
) -> None:
    """The node's only API service stops; a pair is trained through another instance on the same
    database that the node does not dial (the pair reaches no node), and one after the service is
    back, before or after the node redials. Nothing of it was in any replica's memory."""
    port = free_port()
    api: RunningApi | None = RunningApi(api_settings(tmp_path, database_url, "restarting", port))
    node: SmtNode | None = None
    try:
        assert api is not None
        with api.client() as client:
            engine_id = smt_engine(api, client, thot_model)
            node = SmtNode(tmp_path, node_token_of(api), "restart-node", [api.grpc_target])
            connected(api, node)
            (source, target), (source2, target2), (source3, target3) = UNSEEN[3], UNSEEN[4], UNSEEN[5]
            translate(client, engine_id, source)
            train(client, engine_id, source, target)
            learned_through(api, node, engine_id, last_pair(api, engine_id))
        api.close()
        api = None

        other = RunningApi(api_settings(tmp_path, database_url, "elsewhere"))
        try:
            with other.client() as client:
                train(client, engine_id, source2, target2)
        finally:
            other.close()

        api = RunningApi(api_settings(tmp_path, database_url, "restarting", port))
        with api.client() as client:
            train(client, engine_id, source3, target3)
            learned_through(api, node, engine_id, last_pair(api, engine_id))
            for src, trg in ((source, target), (source2, target2), (source3, target3)):
                assert first_words(translate(client, engine_id, src)) == first_words(trg)
            assert node.metric("serval_node_train_segments_caught_up_total") >= 1
            assert node.metric("serval_node_model_load_seconds_count") == 1, "not by a reload's replay"
    finally:
        if node is not None:
            node.stop()
            print(node.log.read_text()[-4000:])
        if api is not None:
            api.close()
