"""How an inference node answers one work item, with a real model in a local model store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from build_jobs.publish import publish_inference_only
from inference_gpu.node import InferenceNode
from serval.inference.v1 import node_pb2, node_pb2_grpc
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


def work(
    segment: str, *, location: str = "models/e1/1", deadline_in_s: float = 30, request_id: str = "r1"
) -> node_pb2.WorkItem:
    deadline = Timestamp()
    deadline.FromNanoseconds(time.time_ns() + int(deadline_in_s * 1e9))
    return node_pb2.WorkItem(
        request_id=request_id,
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


class ScriptedApi(node_pb2_grpc.InferenceNodeApiServicer):
    """The API service's end of one node session, played by the test: it welcomes the node (saying
    whether it reads `WorkResults`), sends its work items in one `WorkItems` message and keeps
    what the node writes back until every item is answered."""

    def __init__(self, items: list[node_pb2.WorkItem], *, batches: bool) -> None:
        self.items = items
        self.batches = batches
        self.hello = node_pb2.Hello()
        self.kinds: list[str] = []
        self.results: dict[str, node_pb2.WorkResult] = {}
        self.answered = asyncio.Event()

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        first = await context.read()
        assert isinstance(first, node_pb2.NodeMessage)
        self.hello = first.hello
        welcome = node_pb2.Welcome(
            protocol_version=node_pb2.PROTOCOL_VERSION_2, session_id="s1", batches=self.batches
        )
        await context.write(node_pb2.ApiMessage(welcome=welcome))
        await context.write(node_pb2.ApiMessage(work_items=node_pb2.WorkItems(items=self.items)))
        while len(self.results) < len(self.items):
            message = await context.read()
            assert isinstance(message, node_pb2.NodeMessage)
            kind = str(message.WhichOneof("body"))
            if kind in ("result", "results"):
                self.kinds.append(kind)
                results = message.results.results if kind == "results" else [message.result]
                self.results.update((r.request_id, r) for r in results)
        self.answered.set()
        await asyncio.sleep(3600)  # the session stays open until the test ends it


@pytest.mark.parametrize("batches", [True, False], ids=["batches", "earlier-api"])
def test_a_node_runs_every_item_of_a_batch_and_answers_in_batches_where_the_api_reads_them(
    tmp_path: Path, node: InferenceNode, batches: bool
) -> None:
    """Six work items in one `WorkItems` message are all run and answered. Results finished
    together go in one `WorkResults` to an API service whose Welcome says it reads them, and one
    message each to an API service of an earlier release."""
    verses = [f"{VERSE} ({i})" for i in range(6)]
    items = [work(verse, request_id=f"r{i}") for i, verse in enumerate(verses)]
    api = ScriptedApi(items, batches=batches)

    async def run() -> None:
        server = grpc.aio.server()
        node_pb2_grpc.add_InferenceNodeApiServicer_to_server(api, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        settings = node.settings.model_copy(
            update={"node": node.settings.node.model_copy(update={"api_addresses": [f"127.0.0.1:{port}"]})}
        )
        session = InferenceNode(settings)
        link = asyncio.create_task(session.links[0].run())
        try:
            async with asyncio.timeout(120):
                await api.answered.wait()
        finally:
            link.cancel()
            await asyncio.gather(link, return_exceptions=True)
            await session.models.close()
            await server.stop(None)

    asyncio.run(run())
    assert api.hello.batches, "the node says it reads WorkItems"
    assert sorted(api.results) == [f"r{i}" for i in range(6)]

    async def each_alone() -> list[node_pb2.WorkResult]:
        try:
            return [await node.work.execute(item) for item in items]
        finally:
            await node.models.close()

    for i, result in enumerate(asyncio.run(each_alone())):
        alone = result.translate.results[0]
        answer = api.results[f"r{i}"].translate.results[0]
        assert (answer.translation, answer.target_tokens) == (alone.translation, alone.target_tokens)
    if batches:
        assert "results" in api.kinds and len(api.kinds) < 6, api.kinds
    else:
        assert api.kinds == ["result"] * 6
