"""NMT engines that learn a confirmed verse at once: a revision that reads fuzzy matches
(`Manifest.input_format = "fuzzy-match"`) is served with its translation memory, and a pair
trained on its engine reaches the memory of the node holding it before train-segment answers
(serval_common/fuzzy_memory.py, docs/learning.md).

A real node process serves the tiny base model's weights as three engines' revisions: two that
read fuzzy matches (owner A's and owner B's) and one plain (owner A's), each published the way a
build job publishes its revision, with the build played through the platform API."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_common.fuzzy_memory import FUZZY_MATCH_INPUT, MEMORY_FILE, TranslationMemory
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.nodes import Node, admin_nodes, translate
from tests.e2e.test_hot_swap import publish_and_complete
from tests.helpers import verse_pairs, wait_until

CONFIRMED = (
    "Jesus answered them, Go and tell John the things which you have heard.",
    "Yesu akawajibu, Enendeni mkamwambie Yohana mambo mliyoyasikia.",
)
SIMILAR = "Jesus answered them, Go and tell Peter the things which you have seen."


@pytest.fixture
def node(api: RunningApi, store: ModelStore, node_token: str, tmp_path: Path) -> Iterator[Node]:
    started = Node(api, tmp_path, node_token, "learning-node")
    try:
        yield started
    finally:
        started.stop()


def built(api: RunningApi, client: httpx.Client, model: Path, folder: Path, *, fuzzy: bool) -> dict[str, Any]:
    """An nmt engine whose build published `model`'s weights as its revision, with a memory of a
    few New Testament verses when `fuzzy`, and completed."""
    engine = create_engine(client)
    shutil.copytree(model, folder)
    if fuzzy:
        sources, targets = verse_pairs("engwebp", "swh1850", 40)
        TranslationMemory(zip(sources, targets, strict=True)).write(folder / MEMORY_FILE)
    publish_and_complete(api, client, engine["id"], folder, FUZZY_MATCH_INPUT if fuzzy else "plain")
    return engine


def train(client: httpx.Client, engine_id: str, source: str, target: str) -> None:
    answer = client.post(
        f"/translation/engines/{engine_id}/train-segment",
        json={"sourceSegment": source, "targetSegment": target, "sentenceStart": True},
    )
    assert answer.status_code == 200, answer.text


def translation(client: httpx.Client, engine_id: str, segment: str) -> str:
    return str(translate(client, engine_id, segment).json()["translation"])


@pytest.mark.sqlite_pass_only
def test_a_confirmed_verse_changes_the_next_translation_of_a_similar_one_on_its_engine_only(
    api: RunningApi, store: ModelStore, node: Node, node_token: str, tiny_ct2_model: Path, tmp_path: Path
) -> None:
    with api.client("owner-a") as a, api.client("owner-b") as b:
        learning = built(api, a, tiny_ct2_model, tmp_path / "a-fuzzy", fuzzy=True)
        plain = built(api, a, tiny_ct2_model, tmp_path / "a-plain", fuzzy=False)
        other = built(api, b, tiny_ct2_model, tmp_path / "b-fuzzy", fuzzy=True)
        before = {
            e["id"]: translation(c, e["id"], SIMILAR) for c, e in ((a, learning), (a, plain), (b, other))
        }

        for client, engine in ((a, learning), (a, plain)):
            train(client, engine["id"], *CONFIRMED)
        after = {
            e["id"]: translation(c, e["id"], SIMILAR) for c, e in ((a, learning), (a, plain), (b, other))
        }

        assert after[learning["id"]] != before[learning["id"]], "the very next similar verse reads the pair"
        assert after[plain["id"]] == before[plain["id"]], "a plain revision reads no memory"
        assert after[other["id"]] == before[other["id"]], "owner B's engine never reads owner A's pair"
        assert translation(a, learning["id"], CONFIRMED[0]) == CONFIRMED[1], "an exact repeat: the overlay"
        models = {m["engineId"]: m for m in admin_nodes(api)["learning-node"]["models"]}
        assert models[learning["id"]]["weights"] == f"models/{learning['id']}/1", "never shared"
        assert models[plain["id"]]["weights"] != f"models/{plain['id']}/1", "plain weights are shared"

        # A node that loads the revision afresh replays the pair into its memory.
        node.stop()
        again = Node(api, tmp_path, node_token, "second-node")
        try:
            assert translation(a, learning["id"], SIMILAR) == after[learning["id"]]
            assert translation(b, other["id"], SIMILAR) == before[other["id"]]

            # A deleted engine's memory is gone: its revision folder and its pairs, and the node
            # lets its model go.
            assert a.delete(f"/translation/engines/{learning['id']}").status_code == 200
            wait_until(lambda: not store.list_keys(f"models/{learning['id']}"), 30, "the revision removed")
            wait_until(
                lambda: (
                    learning["id"] not in {m["engineId"] for m in admin_nodes(api)["second-node"]["models"]}
                ),
                60,
                "the node let the deleted engine's model go",
            )
            assert translation(b, other["id"], SIMILAR) == before[other["id"]]
        finally:
            again.stop()
