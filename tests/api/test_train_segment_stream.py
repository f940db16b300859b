"""50,000 trained segments since the last build, over real gRPC and the real database: the
one-message `GetTrainSegments` of earlier releases cannot carry them (gRPC's 4 MiB limit), while
`StreamTrainSegments` sends every pair in order in messages of about 1 MiB, from any pair number on,
and a real node's fetch (`InferenceNode.train_segments`) reads them whole."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import insert

from inference_gpu.node import InferenceNode
from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_api.db.models import TrainSegmentRow, utcnow
from serval_api.routing.replay import CHUNK_BYTES
from serval_api.service.train_segments import source_key
from serval_common.settings import NodeSettings, Settings
from tests.api.conftest import RunningApi
from tests.api.test_family_routing import built_engine
from tests.api.test_node_protocol import new_node_token
from tests.helpers import fresh_database, verse_pairs

pytestmark = pytest.mark.database

PAIRS = 50_000


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    home = tmp_path_factory.mktemp("api")
    with fresh_database(home) as url:
        running = RunningApi(Settings(home=home, database_url=url))
        try:
            yield running
        finally:
            running.close()


@pytest.fixture(scope="module")
def engine(api: RunningApi) -> tuple[str, list[tuple[str, str]]]:
    """An smt-transfer engine built once, then 50,000 verse-length pairs stored as train-segment
    stores them (written in bulk: 50,000 HTTP calls would only slow the test)."""
    with api.client() as client:
        engine_id = built_engine(api, client)
    sources, targets = verse_pairs("engwebp", "swh1850", 8000)
    pairs = [(f"{sources[i % len(sources)]} ({i})", targets[i % len(targets)]) for i in range(PAIRS)]
    assert api.service.services is not None
    db = api.service.services.db

    async def store() -> None:
        now = utcnow()
        async with db.session() as s:
            for start in range(0, PAIRS, 5000):
                await s.execute(
                    insert(TrainSegmentRow),
                    [
                        {
                            "engine_id": engine_id,
                            "owner": "owner-a",
                            "source_key": source_key(source),
                            "source_segment": source,
                            "target_segment": target,
                            "sentence_start": True,
                            "created_at": now,
                            "updated_at": now,
                        }
                        for source, target in pairs[start : start + 5000]
                    ],
                )

    api.run(store())
    return engine_id, pairs


def request(engine_id: str, after_seq: int = 0) -> node_pb2.GetTrainSegmentsRequest:
    return node_pb2.GetTrainSegmentsRequest(
        model=node_pb2.ModelRef(location=f"models/{engine_id}/1"), after_seq=after_seq
    )


def test_the_stream_carries_every_pair_in_bounded_messages(
    api: RunningApi, engine: tuple[str, list[tuple[str, str]]]
) -> None:
    engine_id, pairs = engine
    token = new_node_token(api)
    metadata = (("authorization", f"Bearer {token}"),)
    stub = node_pb2_grpc.InferenceNodeApiStub(api.channel)

    with pytest.raises(grpc.RpcError) as error:
        stub.GetTrainSegments(request(engine_id), metadata=metadata, timeout=120)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (
        "one message cannot carry them: why nodes stream"
    )

    chunks = list(stub.StreamTrainSegments(request(engine_id), metadata=metadata, timeout=120))
    assert len(chunks) > 4
    assert all(chunk.ByteSize() <= CHUNK_BYTES + 64 * 1024 for chunk in chunks), "bounded messages"
    received = [op for chunk in chunks for op in chunk.segments]
    assert [(op.source_segment, op.target_segment) for op in received] == pairs
    seqs = [op.seq for op in received]
    assert seqs == sorted(seqs) and len(set(seqs)) == PAIRS
    assert [chunk.through for chunk in chunks] == [chunk.segments[-1].seq for chunk in chunks]

    tail = list(stub.StreamTrainSegments(request(engine_id, seqs[-11]), metadata=metadata, timeout=30))
    assert [op.seq for chunk in tail for op in chunk.segments] == seqs[-10:]
    [done] = stub.StreamTrainSegments(request(engine_id, seqs[-1]), metadata=metadata, timeout=30)
    assert (list(done.segments), done.through) == ([], seqs[-1]), "nothing more: one empty message"
    small = stub.GetTrainSegments(request(engine_id, seqs[-3]), metadata=metadata, timeout=30)
    assert ([op.seq for op in small.segments], small.through) == (seqs[-2:], seqs[-1])


def test_a_node_fetches_them_all(
    api: RunningApi, engine: tuple[str, list[tuple[str, str]]], tmp_path: Path
) -> None:
    engine_id, pairs = engine
    settings = Settings(
        home=tmp_path,
        node=NodeSettings(api_addresses=[api.grpc_target], token=new_node_token(api), device="cpu"),
    )
    node = InferenceNode(settings)
    ref = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")
    segments, through = asyncio.run(node.train_segments(ref))
    assert [(op.source_segment, op.target_segment) for op in segments] == pairs
    assert through == segments[-1].seq
    later, same = asyncio.run(node.train_segments(ref, segments[-5].seq))
    assert ([op.seq for op in later], same) == ([op.seq for op in segments[-4:]], through)
