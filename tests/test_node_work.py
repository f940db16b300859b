"""How an inference node answers one work item, with a real model in a local model store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from build_jobs.publish import publish_inference_only
from inference_gpu.node import InferenceNode
from serval.inference.v1 import node_pb2
from serval_common.settings import NodeSettings, Settings, StoreSettings
from serval_common.store import open_store
from tests.helpers import publish_tiny_base_model

VERSE = "Blessed are the peacemakers, for they shall be called children of God."


@pytest.fixture
def node(tmp_path: Path, tiny_ct2_model: Path) -> InferenceNode:
    store = open_store((tmp_path / "store").as_uri())
    publish_tiny_base_model(store, tiny_ct2_model, "tiny")
    publish_inference_only(
        store,
        engine_id="e1",
        revision=1,
        build_id="b1",
        base_model="tiny",
        source_language="eng_Latn",
        target_language="swh_Latn",
    )
    settings = Settings(
        home=tmp_path, store=StoreSettings(url=store.url), node=NodeSettings(max_input_tokens=40)
    )
    return InferenceNode(settings)


def work(segment: str, *, location: str = "models/e1/1", deadline_in_s: float = 30) -> node_pb2.WorkItem:
    deadline = Timestamp()
    deadline.FromNanoseconds(time.time_ns() + int(deadline_in_s * 1e9))
    return node_pb2.WorkItem(
        request_id="r1",
        deadline=deadline,
        model=node_pb2.ModelRef(engine_id="e1", revision=1, location=location),
        translate=node_pb2.TranslateOp(
            segment=segment, n=1, source_language="eng_Latn", target_language="swh_Latn"
        ),
    )


def execute(node: InferenceNode, item: node_pb2.WorkItem) -> node_pb2.WorkResult:
    async def run() -> node_pb2.WorkResult:
        try:
            return await node.work.execute(item)
        finally:
            await node.models.close()

    return asyncio.run(run())


def test_translates_with_the_revision(node: InferenceNode) -> None:
    result = execute(node, work(VERSE))
    assert result.WhichOneof("outcome") == "translate"
    assert result.translate.results[0].target_tokens


def test_work_past_its_deadline_is_dropped_unrun(node: InferenceNode) -> None:
    result = execute(node, work(VERSE, deadline_in_s=-1))
    assert result.error.code == node_pb2.WORK_ERROR_CODE_DEADLINE_EXCEEDED
    assert node.models.held.statuses() == [], "no model was loaded for work nobody waits for"


def test_a_draining_node_refuses_work(node: InferenceNode) -> None:
    node.draining = True
    assert execute(node, work(VERSE)).error.code == node_pb2.WORK_ERROR_CODE_OVERLOADED


def test_too_long_input_is_an_invalid_argument(node: InferenceNode) -> None:
    result = execute(node, work(" ".join(["word"] * 100)))
    assert result.error.code == node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT
    assert "at most 40" in result.error.message


def test_missing_revision_is_named(node: InferenceNode) -> None:
    result = execute(node, work(VERSE, location="models/e1/9"))
    assert result.error.code == node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE
    assert "models/e1/9" in result.error.message
