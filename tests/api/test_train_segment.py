from __future__ import annotations

import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_api.auth import READ_ENGINES
from serval_api.service.train_segments import normalize
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import MAX_SEGMENT_CHARS, RunningApi, create_engine, wait_for_build

SOURCE = "In the beginning was the Word."
TARGET = "Hapo mwanzo kulikuwako Neno."


def built_engine(api: RunningApi, client: httpx.Client, engine_type: str = "nmt") -> str:
    """An engine whose first build is Completed (an nmt build completed by its job)."""
    engine_id: str = create_engine(client, engine_type=engine_type)["id"]
    build = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert build.status_code == 201, build.text
    if engine_type == "nmt":
        auth = (("authorization", f"Bearer {api.launcher.specs[-1].job_token}"),)
        job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
        job.BuildCompleted(
            platform_pb2.BuildCompletedRequest(build_id=build.json()["id"], corpus_size=0, confidence=0),
            metadata=auth,
        )
    else:
        assert wait_for_build(client, build.json())["state"] == "Completed"
    assert client.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 1
    return engine_id


def train(client: httpx.Client, engine_id: str, source: str, target: str) -> httpx.Response:
    return client.post(
        f"/translation/engines/{engine_id}/train-segment",
        json={"sourceSegment": source, "targetSegment": target, "sentenceStart": True},
    )


def translate(client: httpx.Client, engine_id: str, segment: str) -> httpx.Response:
    return client.post(f"/translation/engines/{engine_id}/translate", json=segment)


def assert_human(result: dict[str, Any], target: str = TARGET) -> None:
    words = len(result["targetTokens"])
    assert result["translation"] == target
    assert result["confidences"] == [1.0] * words
    assert result["sources"] == [["Human"]] * words
    assert result["phrases"] == [
        {"sourceSegmentStart": 0, "sourceSegmentEnd": len(result["sourceTokens"]), "targetSegmentCut": words}
    ]


def test_trained_pair_answers_translate_over_rest(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    response = train(client, engine_id, SOURCE, TARGET)
    assert response.status_code == 200
    assert response.content == b""

    result = translate(client, engine_id, SOURCE)
    assert result.status_code == 200
    body = result.json()
    assert_human(body)
    assert body["sourceTokens"] == ["In", "the", "beginning", "was", "the", "Word", "."]
    assert body["targetTokens"] == ["Hapo", "mwanzo", "kulikuwako", "Neno", "."]
    pairs = [(a["sourceIndex"], a["targetIndex"]) for a in body["alignment"]]
    assert pairs == sorted(pairs) and pairs[0] == (0, 0) and pairs[-1] == (6, 4)
    assert {s for s, _ in pairs} == set(range(7)) and {t for _, t in pairs} == set(range(5))

    n_best = client.post(f"/translation/engines/{engine_id}/translate/3", json=SOURCE)
    assert n_best.status_code == 200
    assert len(n_best.json()) == 1
    assert_human(n_best.json()[0])


def test_trained_pair_answers_translate_over_grpc(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    auth = (("x-api-key", api.api_key()),)
    stub.TrainSegmentPair(
        engine_pb2.TrainSegmentPairRequest(
            engine_type="Nmt",
            engine_id=engine_id,
            source_segment=SOURCE,
            target_segment=TARGET,
            sentence_start=True,
        ),
        metadata=auth,
    )
    response = stub.Translate(
        engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine_id, segment=SOURCE, n=2),
        metadata=auth,
    )
    [result] = response.results
    assert result.translation == TARGET
    assert list(result.confidences) == [1.0] * len(result.target_tokens)
    assert all(list(s.values) == [engine_pb2.TRANSLATION_SOURCE_HUMAN] for s in result.sources)

    with pytest.raises(grpc.RpcError) as error:
        stub.TrainSegmentPair(
            engine_pb2.TrainSegmentPairRequest(
                engine_type="Nmt", engine_id=engine_id, source_segment=" ", target_segment=TARGET
            ),
            metadata=auth,
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_match_is_normalized_but_exact(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    source = "Café  au lait, s'il vous plaît."
    assert train(client, engine_id, source, "Kahawa na maziwa.").status_code == 200

    nfd_and_spaces = "  " + unicodedata.normalize("NFD", source).replace(" ", " \t\n ") + " "
    assert nfd_and_spaces != source and normalize(nfd_and_spaces) == normalize(source)
    hit = translate(client, engine_id, nfd_and_spaces)
    assert hit.status_code == 200
    assert_human(hit.json(), "Kahawa na maziwa.")

    for other in (source.lower(), source.rstrip("."), "Something else."):
        missed = translate(client, engine_id, other)
        assert missed.status_code == 503, "no match, so the nmt engine needs a node and none is connected"


def test_echo_engine_answers_the_pair_and_echoes_the_rest(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client, engine_type="echo")
    assert train(client, engine_id, SOURCE, TARGET).status_code == 200
    assert_human(translate(client, engine_id, SOURCE).json())
    echoed = translate(client, engine_id, "Something else.").json()
    assert echoed["translation"] == "Something else."
    assert echoed["sources"] == [["Primary"]] * 3


def test_training_again_replaces_the_target(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    assert train(client, engine_id, SOURCE, "first").status_code == 200
    assert train(client, engine_id, f" {SOURCE}  ", "second").status_code == 200
    assert translate(client, engine_id, SOURCE).json()["translation"] == "second"

    build = client.post(f"/translation/engines/{engine_id}/builds", json={}).json()
    assert build["executionData"]["trainSegmentCount"] == 1


def test_concurrent_trainings_of_one_source_keep_one_pair(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    targets = [f"target {i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda t: train(client, engine_id, SOURCE, t).status_code, targets))
    assert statuses == [200] * len(targets)
    assert translate(client, engine_id, SOURCE).json()["translation"] in targets
    build = client.post(f"/translation/engines/{engine_id}/builds", json={}).json()
    assert build["executionData"]["trainSegmentCount"] == 1


def test_pairs_survive_a_restart(tmp_path: Path, database_url: str) -> None:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, max_segment_chars=MAX_SEGMENT_CHARS),
    )
    first = RunningApi(settings)
    try:
        with first.client() as client:
            engine_id = built_engine(first, client)
            assert train(client, engine_id, SOURCE, TARGET).status_code == 200
    finally:
        first.close()
    second = RunningApi(settings)
    try:
        with second.client() as client:
            assert_human(translate(client, engine_id, SOURCE).json())
    finally:
        second.close()


def test_next_build_exports_the_pairs(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    assert train(client, engine_id, "First  line.", "Mstari wa\nkwanza.").status_code == 200
    assert train(client, engine_id, SOURCE, TARGET).status_code == 200

    response = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert response.status_code == 201, response.text
    build = response.json()
    assert build["executionData"]["trainCount"] == 2
    assert build["executionData"]["trainSegmentCount"] == 2
    assert api.launcher.specs[-1].train is True
    assert api.service.services is not None
    store = api.service.services.store
    prefix = f"builds/{build['id']}"
    assert store.read_bytes(f"{prefix}/train.src.txt").decode() == f"First line.\n{SOURCE}\n"
    assert store.read_bytes(f"{prefix}/train.trg.txt").decode() == f"Mstari wa kwanza.\n{TARGET}\n"


def test_inference_only_build_leaves_the_pairs_out(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client)
    assert train(client, engine_id, SOURCE, TARGET).status_code == 200
    build = client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []}).json()
    assert build["executionData"]["trainSegmentCount"] == 0
    assert api.launcher.specs[-1].train is False


def test_errors(api: RunningApi, client: httpx.Client) -> None:
    unbuilt = create_engine(client)["id"]
    not_built = train(client, unbuilt, SOURCE, TARGET)
    assert not_built.status_code == 409 and "not been built" in not_built.json()["message"]

    engine_id = built_engine(api, client)
    assert train(client, "000000000000000000000000", SOURCE, TARGET).status_code == 404
    for source, target in (("   ", TARGET), (SOURCE, ""), (SOURCE, " \n ")):
        assert train(client, engine_id, source, target).status_code == 400
    missing_target = {"sourceSegment": SOURCE}
    url = f"/translation/engines/{engine_id}/train-segment"
    assert client.post(url, json=missing_target).status_code == 400
    too_long = "a" * (MAX_SEGMENT_CHARS + 1)
    for source, target in ((too_long, TARGET), (SOURCE, too_long)):
        oversized = train(client, engine_id, source, target)
        assert oversized.status_code == 413 and str(MAX_SEGMENT_CHARS) in oversized.json()["message"]

    with api.client(owner="owner-b") as other:
        assert train(other, engine_id, SOURCE, TARGET).status_code == 403
    with api.client(scopes=(READ_ENGINES,)) as reader:
        assert train(reader, engine_id, SOURCE, TARGET).status_code == 403
    anonymous = httpx.post(
        f"{api.rest_url}/api/v1/translation/engines/{engine_id}/train-segment",
        json={"sourceSegment": SOURCE, "targetSegment": TARGET, "sentenceStart": True},
    )
    assert anonymous.status_code == 401
    assert translate(client, engine_id, SOURCE).status_code == 503, "no failed call stored a pair"
