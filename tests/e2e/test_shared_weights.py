"""One NLLB for every engine: revisions that serve the same weights share one loaded model on a
real node process, whatever their engine, owner or target language, and their requests share
batches; what differs per engine (owner checks, trained segments, revisions) stays per engine.

The API service runs in process (builds played by the test through the platform API, publishing
inference-only revisions of the tiny base model as the build job does); the nodes are processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from serval_api.auth import ADMIN
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi
from tests.e2e.nodes import Node, admin_nodes, built_engines, translate
from tests.e2e.test_hot_swap import publish_and_complete
from tests.helpers import distinct_weights, rss_bytes, verse_pairs, wait_until

ENGINES = 12
ROUNDS = 4
RSS_GROWTH_LIMIT = 5 << 20


@pytest.fixture
def node(api: RunningApi, store: ModelStore, node_token: str, tmp_path: Path) -> Iterator[Node]:
    started = Node(api, tmp_path, node_token, "shared-node")
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.sqlite_pass_only
def test_twelve_engines_on_one_base_model_share_one_loaded_model_and_its_batches(
    api: RunningApi, store: ModelStore, node: Node
) -> None:
    sources, _ = verse_pairs("engwebp", "swh1850", ENGINES)
    engines = built_engines(api, store, ENGINES)

    first_client, first = engines[0]
    translate(first_client, first["id"], sources[0])
    assert node.loads() == 1
    rss_one_engine = rss_bytes(node.process.pid)

    alone = {}
    for i, (client, engine) in enumerate(engines):
        answer = translate(client, engine["id"], sources[i])
        assert answer.headers["X-Model-Revision"] == "1"
        alone[engine["id"]] = answer.json()["translation"]
    assert node.loads() == 1, "a new engine on the loaded base model loads nothing"
    assert node.metric("serval_node_models_loaded") == 1
    assert node.metric("serval_node_revisions_loaded") == ENGINES
    growth = rss_bytes(node.process.pid) - rss_one_engine
    assert growth < RSS_GROWTH_LIMIT, f"the node grew by {growth} bytes for {ENGINES - 1} more engines"
    assert len({alone[e["id"]] for _, e in engines[:3]}) == 3, "three target languages, three answers"

    [view] = admin_nodes(api).values()
    assert view["loadedModels"] == 1
    assert {m["weights"] for m in view["models"]} == {view["models"][0]["weights"]}
    assert len(view["models"]) == ENGINES and view["memoryHeldBytes"] == view["models"][0]["sizeBytes"]

    batches_before = node.metric("serval_node_batch_engines_count")
    lone_before = node.metric("serval_node_batch_engines_bucket", 'le="1.0"')
    together: dict[str, list[str]] = {e["id"]: [] for _, e in engines}
    start = threading.Barrier(ENGINES)

    def client_of(i: int) -> None:
        owner = "owner-a" if i % 2 == 0 else "owner-b"
        engine = engines[i][1]
        with api.client(owner) as own:
            start.wait(timeout=30)
            for _ in range(ROUNDS):
                together[engine["id"]].append(translate(own, engine["id"], sources[i]).json()["translation"])

    threads = [threading.Thread(target=client_of, args=(i,)) for i in range(ENGINES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert all(len(answers) == ROUNDS for answers in together.values())
    assert together == {engine_id: [text] * ROUNDS for engine_id, text in alone.items()}, (
        "each engine answers in a shared batch exactly as it does alone"
    )
    mixed = (node.metric("serval_node_batch_engines_count") - batches_before) - (
        node.metric("serval_node_batch_engines_bucket", 'le="1.0"') - lone_before
    )
    assert mixed > 0, "some batches held requests of several engines"
    assert node.loads() == 1


@pytest.mark.sqlite_pass_only
def test_engines_sharing_weights_stay_apart(
    api: RunningApi, store: ModelStore, node: Node, tiny_ct2_model: Path
) -> None:
    (client_a, a), (client_b, b) = built_engines(api, store, 2)
    verse = verse_pairs("engwebp", "swh1850", 1)[0][0]
    model_answer = translate(client_b, b["id"], verse).json()["translation"]
    translate(client_a, a["id"], verse)
    assert node.loads() == 1

    trained = client_a.post(
        f"/translation/engines/{a['id']}/train-segment",
        json={
            "sourceSegment": verse,
            "targetSegment": "Maneno ya mmiliki A peke yake.",
            "sentenceStart": True,
        },
    )
    assert trained.status_code == 200, trained.text
    assert translate(client_a, a["id"], verse).json()["translation"] == "Maneno ya mmiliki A peke yake."
    assert translate(client_b, b["id"], verse).json()["translation"] == model_answer, (
        "A's trained segment never reaches B"
    )
    for path in ("", "/translate", "/builds"):
        method = client_b.post if path == "/translate" else client_b.get
        kwargs = {"json": verse} if path == "/translate" else {}
        assert method(f"/translation/engines/{a['id']}{path}", **kwargs).status_code == 403, (
            "another owner's engine is forbidden, as in Serval"
        )

    # A fine-tune of A (its own weights) swaps A alone; B keeps the base model.
    publish_and_complete(api, client_a, a["id"], distinct_weights(tiny_ct2_model, "fine-tuned-a"))
    answer = translate(client_a, a["id"], "In the beginning was the Word.")
    assert answer.headers["X-Model-Revision"] == "2"
    wait_until(
        lambda: node.metric("serval_node_models_loaded") == 2, 30, "A's fine-tune loaded beside the base"
    )
    wait_until(
        lambda: node.metric("serval_node_revisions_loaded") == 2, 30, "A's inference-only revision let go"
    )
    [view] = admin_nodes(api).values()
    weights = {(m["engineId"], m["revision"]): m["weights"] for m in view["models"]}
    assert set(weights) == {(a["id"], 2), (b["id"], 1)} and len(set(weights.values())) == 2
    loads = node.loads()
    assert translate(client_b, b["id"], verse).json()["translation"] == model_answer
    assert node.loads() == loads

    # Deleting A unloads A's own weights and keeps the base model serving B.
    assert client_a.delete(f"/translation/engines/{a['id']}").status_code == 200
    wait_until(lambda: node.metric("serval_node_models_loaded") == 1, 30, "A's weights unloaded")
    assert translate(client_b, b["id"], verse).json()["translation"] == model_answer
    assert node.loads() == loads, "B was served without a load"


@pytest.mark.sqlite_pass_only
def test_draining_a_node_moves_every_alias_and_loads_the_weights_once(
    api: RunningApi, store: ModelStore, node_token: str, tmp_path: Path
) -> None:
    first = Node(api, tmp_path, node_token, "node-a")
    engines = built_engines(api, store, 6)
    verse = verse_pairs("engwebp", "swh1850", 1)[0][0]
    try:
        for client, engine in engines:
            translate(client, engine["id"], verse)
        assert first.metric("serval_node_revisions_loaded") == 6
        second = Node(api, tmp_path, node_token, "node-b")
        try:
            with api.client("ops", (ADMIN,)) as admin:
                assert admin.post("/admin/nodes/node-a/drain", json={"reason": "maintenance"}).is_success
            for client, engine in engines:
                translate(client, engine["id"], verse)
            assert second.loads() == 1, "the drained node's aliases moved with one load of their weights"
            assert second.metric("serval_node_models_loaded") == 1
            assert second.metric("serval_node_revisions_loaded") == 6
            view = admin_nodes(api)["node-b"]
            assert sorted(m["engineId"] for m in view["models"]) == sorted(e["id"] for _, e in engines)
        finally:
            second.stop()
    finally:
        first.stop()
