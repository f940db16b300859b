"""The node's `statistical` family: a Thot aligner of the default type (eflomal; the job tests
train HMM and fast_align ones) trained here on 250 verse pairs, published to a
real local model store the way a build publishes it, loaded by the node (fetch, verify, load
through the family registry) and by `AlignmentModel` directly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from build_jobs.publish import publish_revision
from inference_gpu.families import Unsupported, model_class
from inference_gpu.families.alignment import AlignmentModel, ModelClosed
from inference_gpu.families.base import Capability, InputTooLong
from inference_gpu.node import InferenceNode
from serval.inference.v1 import node_pb2
from serval_common.core import WordAlignmentResult
from serval_common.manifest import Manifest, fetch_folder
from serval_common.settings import NodeSettings, Settings, StoreSettings
from serval_common.store import ModelStore, open_store
from serval_common.thot_alignment import BACKEND, AlignmentSettings, train
from tests.helpers import verse_pairs

SOURCE = "Abraham became the father of Isaac. Isaac became the father of Jacob."
TARGET = "Abrahamu alimzaa Isaka, Isaka alimzaa Yakobo,"


@dataclass(frozen=True)
class Published:
    store: ModelStore
    home: Path
    folder: Path
    manifest: Manifest


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    tmp = tmp_path_factory.mktemp("align-node")
    sources, targets = verse_pairs("engwebp", "swh1850", 250)
    trained = train(list(zip(sources, targets, strict=True)), tmp / "model", AlignmentSettings(iterations=4))
    store = open_store((tmp / "store").as_uri())
    manifest = Manifest(
        kind="model-revision",
        backend=BACKEND,
        engine_id="e1",
        revision=1,
        build_id="b1",
        source_language="en",
        target_language="sw",
        scores={"direction_agreement": trained.agreement},
    )
    manifest = publish_revision(store, manifest, tmp / "model", None)
    _, folder = fetch_folder(store, "models/e1/1", tmp / "cache")
    return Published(store, tmp, folder, manifest)


@pytest.fixture
def model(published: Published) -> Iterator[AlignmentModel]:
    loaded = model_class(published.manifest.backend).load(
        published.folder, published.manifest, NodeSettings(max_input_tokens=40)
    )
    assert isinstance(loaded, AlignmentModel)
    yield loaded
    asyncio.run(loaded.close())


def pairs(result: WordAlignmentResult) -> dict[tuple[str, str], float]:
    return {
        (result.source_tokens[k.source_index], result.target_tokens[k.target_index]): k.score
        for k in result.alignment
    }


def test_aligns_a_pair_with_probabilities(model: AlignmentModel) -> None:
    result = asyncio.run(model.align(SOURCE, TARGET))

    assert list(result.source_tokens[:3]) == ["Abraham", "became", "the"], "tokens as written"
    assert list(result.target_tokens[:2]) == ["Abrahamu", "alimzaa"]
    for link in result.alignment:
        assert 0 <= link.source_index < len(result.source_tokens)
        assert 0 <= link.target_index < len(result.target_tokens)
        assert 0.0 <= link.score <= 1.0
    links = pairs(result)
    assert {("Abraham", "Abrahamu"), ("Jacob", "Yakobo")} <= set(links)
    assert links[("Abraham", "Abrahamu")] > 0.5
    assert model.pending == 0
    assert model.size_bytes > 0


def test_words_never_seen_in_training_get_low_scores(model: AlignmentModel) -> None:
    """A live pair may hold words the model never saw (a build trains on the rows it aligns, so
    its own rows have none): the pair is still answered, and an unseen word's links score near 0."""
    result = asyncio.run(model.align("Zorobabel had many sons.", "Zorobabeli alikuwa na wana wengi."))
    assert list(result.source_tokens) == ["Zorobabel", "had", "many", "sons", "."]
    links = pairs(result)
    assert links, "positions still align"
    assert all(score < 0.05 for (source, _), score in links.items() if source == "Zorobabel")


def test_only_align_is_supported(model: AlignmentModel) -> None:
    assert model.capabilities == frozenset({Capability.ALIGN})
    assert not model.learns_segments
    with pytest.raises(Unsupported, match="a statistical engine cannot translate"):
        asyncio.run(model.translate("In the beginning", 1, "en", "sw"))
    with pytest.raises(Unsupported, match="cannot word graph"):
        asyncio.run(model.word_graph("In the beginning", "en", "sw"))
    with pytest.raises(Unsupported, match="cannot train segment"):
        asyncio.run(model.train_segment("a", "b", True, 1))


def test_refuses_empty_and_over_long_segments(model: AlignmentModel) -> None:
    with pytest.raises(ValueError, match="must both have text"):
        asyncio.run(model.align("  ", TARGET))
    with pytest.raises(InputTooLong, match="41 tokens; at most 40"):
        asyncio.run(model.align(" ".join(["word"] * 41), TARGET))


def test_calls_run_one_at_a_time_and_a_close_without_drain_fails_the_queued(model: AlignmentModel) -> None:
    async def scenario() -> list[WordAlignmentResult | BaseException]:
        calls = [asyncio.create_task(model.align(SOURCE, TARGET)) for _ in range(4)]
        await asyncio.sleep(0)
        assert model.pending == 4
        await model.close(drain=False)
        with pytest.raises(ModelClosed):
            await model.align(SOURCE, TARGET)
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[0], WordAlignmentResult), "the running call finishes"
    assert all(isinstance(o, ModelClosed) for o in outcomes[1:]), outcomes
    assert model.pending == 0


def test_the_node_aligns_with_the_published_revision(published: Published) -> None:
    settings = Settings(home=published.home / "node", store=StoreSettings(url=published.store.url))
    node = InferenceNode(settings)
    deadline = Timestamp()
    deadline.FromNanoseconds(time.time_ns() + 30 * 10**9)

    def item(op: str) -> node_pb2.WorkItem:
        ref = node_pb2.ModelRef(engine_id="e1", revision=1, location="models/e1/1")
        if op == "align":
            return node_pb2.WorkItem(
                request_id="r1",
                deadline=deadline,
                model=ref,
                align=node_pb2.AlignOp(source_segment=SOURCE, target_segment=TARGET),
            )
        return node_pb2.WorkItem(
            request_id="r2",
            deadline=deadline,
            model=ref,
            translate=node_pb2.TranslateOp(segment=SOURCE, n=1, source_language="en", target_language="sw"),
        )

    async def run() -> tuple[node_pb2.WorkResult, node_pb2.WorkResult]:
        try:
            return await node.work.execute(item("align")), await node.work.execute(item("translate"))
        finally:
            await node.models.close()

    aligned, translated = asyncio.run(run())
    assert aligned.WhichOneof("outcome") == "alignment"
    assert ("Abraham", "Abrahamu") in pairs(aligned.alignment)
    assert translated.error.code == node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED
