"""The `echo-word-alignment` engine type (Serval's `EchoWordAlignmentEngineService`), driven over
REST and gRPC as Serval's client calls it: create, build, read the build's word alignments, align
a pair, delete. No inference node runs: echo engines need none."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from serval.word_alignment.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES
from tests.api.conftest import RunningApi, wait_for_build
from tests.api.test_build_export import ENG_MAT, SWH_MAT, corpus, text
from tests.api.test_word_alignment import WA, wa_engine, wa_parallel_corpus


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def test_rest_workflow(api: RunningApi, owner: httpx.Client) -> None:
    engine = wa_engine(owner, type="EchoWordAlignment")
    assert engine["type"] == "echo-word-alignment"
    engine_id = engine["id"]
    source = corpus(owner, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"MAT.txt": text([SWH_MAT[0], "", SWH_MAT[2]])})
    pc_id = wa_parallel_corpus(owner, engine_id, source, target)
    pair = {"sourceSegment": "In the  beginning", "targetSegment": "Hapo mwanzo"}
    assert owner.post(f"{WA}/{engine_id}/align", json=pair).status_code == 409
    assert owner.get(f"{WA}/{engine_id}/corpora/{pc_id}/word-alignments").status_code == 409
    queue = owner.get("/word-alignment/engine-types/echo-word-alignment/queues")
    assert queue.json() == {"size": 0, "engineType": "echo-word-alignment"}

    started = owner.post(f"{WA}/{engine_id}/builds", json={})
    assert started.status_code == 201, started.text
    assert (started.json()["state"], started.json()["revision"]) == ("Pending", 1)
    done = wait_for_build(owner, started.json(), WA)
    assert done["state"] == "Completed", done
    assert owner.get(f"{WA}/{engine_id}").json()["modelRevision"] == 1

    rows = owner.get(f"{WA}/{engine_id}/corpora/{pc_id}/word-alignments")
    assert rows.status_code == 200, rows.text
    # MAT 1:2 has no Swahili, so only 1:1 and 1:3 are aligned; the build's rows carry score 0,
    # as Serval's echo build leaves it.
    assert [row["sourceRefs"] for row in rows.json()] == [["MAT:1"], ["MAT:3"]]
    first = rows.json()[0]
    assert first["sourceTokens"] == ENG_MAT[0].split(" ")
    assert first["targetTokens"] == SWH_MAT[0].split(" ")
    shorter = min(len(first["sourceTokens"]), len(first["targetTokens"]))
    assert first["alignment"] == [{"sourceIndex": i, "targetIndex": i, "score": 0.0} for i in range(shorter)]

    aligned = owner.post(f"{WA}/{engine_id}/align", json=pair)
    assert aligned.status_code == 200, aligned.text
    assert aligned.headers["x-model-revision"] == "1"
    assert aligned.json() == {
        "sourceTokens": ["In", "the", "", "beginning"],
        "targetTokens": ["Hapo", "mwanzo"],
        "alignment": [
            {"sourceIndex": 0, "targetIndex": 0, "score": 1.0},
            {"sourceIndex": 1, "targetIndex": 1, "score": 1.0},
        ],
    }

    assert owner.delete(f"{WA}/{engine_id}").status_code == 200
    assert owner.get(f"{WA}/{engine_id}").status_code == 404


def test_grpc_workflow(api: RunningApi, owner: httpx.Client) -> None:
    stub = engine_pb2_grpc.WordAlignmentEngineApiStub(api.channel)
    key = (("x-api-key", api.api_key(scopes=ALL_SCOPES)),)
    stub.Create(
        engine_pb2.CreateRequest(
            engine_type="EchoWordAlignment", engine_id="echo-wa", source_language="en", target_language="sw"
        ),
        metadata=key,
    )
    assert owner.get(f"{WA}/echo-wa").json()["type"] == "echo-word-alignment"
    stub.StartBuild(
        engine_pb2.StartBuildRequest(engine_type="EchoWordAlignment", engine_id="echo-wa", build_id="b1"),
        metadata=key,
    )
    started = owner.get(f"{WA}/echo-wa/builds/b1").json()
    assert wait_for_build(owner, started, WA)["state"] == "Completed"

    request = engine_pb2.GetWordAlignmentRequest(
        engine_type="EchoWordAlignment", engine_id="echo-wa", source_segment="a b c", target_segment="x y"
    )
    result, call = stub.GetWordAlignment.with_call(request, metadata=key)
    assert (list(result.result.source_tokens), list(result.result.target_tokens)) == (
        ["a", "b", "c"],
        ["x", "y"],
    )
    assert [(a.source_index, a.target_index, a.score) for a in result.result.alignment] == [
        (0, 0, 1.0),
        (1, 1, 1.0),
    ]
    assert dict(call.trailing_metadata())["x-model-revision"] == "1"
    size = stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="EchoWordAlignment"), metadata=key)
    assert size.size == 0

    stub.Delete(engine_pb2.DeleteRequest(engine_type="EchoWordAlignment", engine_id="echo-wa"), metadata=key)
    assert owner.get(f"{WA}/echo-wa").status_code == 404
