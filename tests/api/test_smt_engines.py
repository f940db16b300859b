"""`smt-transfer` engines as Serval defines them, over REST and gRPC: created, read, listed and
deleted like nmt ones, `isModelPersisted` true unless the client says otherwise, their engine type's
queue and languages, their model download, and gRPC's TrainSegmentPair reaching the nodes."""

from __future__ import annotations

import io
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_common.manifest import Manifest, publish_folder
from serval_common.store import store_from_settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_family_routing import SMT, api, built_engine, node_token, nodes

pytestmark = pytest.mark.database
__all__ = ["api", "node_token"]


def test_rest_create_get_list_and_delete(api: RunningApi) -> None:
    with api.client() as client:
        engine = create_engine(client, engine_type="smt-transfer", name="paratext suggestions")
        assert engine["type"] == "smt-transfer"
        assert engine["isModelPersisted"] is True, "Serval persists smt-transfer models unless told not to"
        assert (engine["modelRevision"], engine["isBuilding"]) == (0, False)
        assert client.get(f"/translation/engines/{engine['id']}").json() == engine
        assert engine["id"] in [e["id"] for e in client.get("/translation/engines").json()]

        kept_off = create_engine(client, engine_type="smt-transfer", isModelPersisted=False)
        assert kept_off["isModelPersisted"] is False
        nmt = create_engine(client, engine_type="nmt")
        assert "isModelPersisted" not in nmt, "nmt keeps Serval's unset default"

        pascal = client.post(
            "/translation/engines",
            json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "SmtTransfer"},
        )
        assert pascal.status_code == 201 and pascal.json()["type"] == "smt-transfer"
        assert client.delete(f"/translation/engines/{engine['id']}").status_code == 200
        assert client.get(f"/translation/engines/{engine['id']}").status_code == 404


def test_grpc_create_and_read_over_rest(api: RunningApi) -> None:
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    key = api.api_key()
    auth = (("x-api-key", key),)
    stub.Create(
        engine_pb2.CreateRequest(
            engine_type="SmtTransfer", engine_id="smt-grpc-engine", source_language="en", target_language="sw"
        ),
        metadata=auth,
    )
    with api.client() as client:
        engine = client.get("/translation/engines/smt-grpc-engine").json()
        assert (engine["type"], engine["isModelPersisted"]) == ("smt-transfer", True)
    with pytest.raises(grpc.RpcError) as error:
        stub.Create(
            engine_pb2.CreateRequest(
                engine_type="Statistical", engine_id="wa-here", source_language="en", target_language="sw"
            ),
            metadata=auth,
        )
    assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
    size = stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="SmtTransfer"), metadata=auth)
    assert size.size == 0
    info = stub.GetLanguageInfo(
        engine_pb2.GetLanguageInfoRequest(engine_type="SmtTransfer", language="sw"), metadata=auth
    )
    assert (info.internal_code, info.is_native) == ("sw", True), "as Serval's SmtTransferEngineService"


def test_engine_type_endpoints(api: RunningApi) -> None:
    with api.client() as client:
        for name in ("smt-transfer", "SmtTransfer"):
            queue = client.get(f"/translation/engine-types/{name}/queues")
            assert queue.status_code == 200
            assert queue.json() == {"size": 0, "engineType": "smt-transfer"}
        language = client.get("/translation/engine-types/smt-transfer/languages/sw")
        assert language.status_code == 200
        assert language.json()["engineType"] == "smt-transfer"
        assert (language.json()["internalCode"], language.json()["isNative"]) == ("sw", True)
        assert client.get("/translation/engine-types/statistical/queues").status_code == 405
        assert client.get("/translation/engine-types/statistical/languages/en").status_code == 404, (
            "as Serval, which has no such translation engine type"
        )


def test_model_download(api: RunningApi, tmp_path: Path) -> None:
    with api.client() as client:
        unbuilt = create_engine(client, engine_type="smt-transfer")["id"]
        assert client.get(f"/translation/engines/{unbuilt}/model-download-url").status_code == 404
        engine_id = built_engine(api, client)
        folder = tmp_path / "thot"
        (folder / "tm").mkdir(parents=True)
        files = {"smt.cfg": b"-tm tm/src_trg\n", "tm/src_trg.ttable": b"in ||| katika ||| 0.5\n"}
        for name, data in files.items():
            (folder / name).write_bytes(data)
        manifest = Manifest(kind="model-revision", backend="thot-smt", engine_id=engine_id, revision=1)
        publish_folder(store_from_settings(api.service.settings), f"models/{engine_id}/1", folder, manifest)

        answer = client.get(f"/translation/engines/{engine_id}/model-download-url")
        assert answer.status_code == 200, answer.text
        assert answer.json()["modelRevision"] == 1
        download = httpx.get(f"{api.rest_url}{urlparse(answer.json()['url']).path}")
        assert download.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as archive:
            contents = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
        assert Manifest.model_validate_json(contents.pop("manifest.json")).backend == "thot-smt"
        assert contents == files


def test_grpc_train_segment_pair_reaches_the_nodes(api: RunningApi, node_token: str) -> None:
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    auth = (("x-api-key", api.api_key()),)
    with (
        api.client() as client,
        nodes(api, node_token, smt_grpc=[SMT]) as [node],
        ThreadPoolExecutor(1) as pool,
    ):
        engine_id = built_engine(api, client)
        node.ready(engine_id)
        request = engine_pb2.TrainSegmentPairRequest(
            engine_type="SmtTransfer",
            engine_id=engine_id,
            source_segment="Jesus wept.",
            target_segment="Yesu akalia machozi.",
            sentence_start=True,
        )
        call = pool.submit(stub.TrainSegmentPair, request, metadata=auth)
        item = node.work()
        assert (item.train_segment.source_segment, item.train_segment.target_segment) == (
            "Jesus wept.",
            "Yesu akalia machozi.",
        )
        node.learned(item)
        call.result(timeout=20)

        translate = pool.submit(
            stub.Translate,
            engine_pb2.TranslateRequest(
                engine_type="SmtTransfer", engine_id=engine_id, segment="Jesus wept."
            ),
            metadata=auth,
        )
        item = node.work()
        assert item.HasField("translate"), "not answered from the stored pair"
        node.translated(item, "Yesu alilia.")
        assert [r.translation for r in translate.result(timeout=20).results] == ["Yesu alilia."]


def test_corpus_size_counts_the_training_pairs_and_the_segments_trained_since(api: RunningApi) -> None:
    """As Serval's smt-transfer: every trained segment adds one, and a completed build's size is
    the pairs its job trained on plus the segments trained while it ran (its revision learns them
    by replay, as Machine's SmtTransferPostprocessBuildJob does)."""
    with api.client() as client:
        engine_id = built_engine(api, client)
        path = f"/translation/engines/{engine_id}"

        def corpus_size() -> int:
            size: int = client.get(path).json()["corpusSize"]
            return size

        def train(source: str) -> None:
            body = {"sourceSegment": source, "targetSegment": f"{source} (sw)", "sentenceStart": True}
            response = client.post(f"{path}/train-segment", json=body)
            assert response.status_code == 200, response.text

        assert corpus_size() == 0
        train("In the beginning.")
        train("Jesus wept.")
        assert corpus_size() == 2, "one per trained segment"

        started = client.post(f"{path}/builds", json={})
        assert started.status_code == 201, started.text
        spec = api.launcher.specs[-1]
        job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
        auth = (("authorization", f"Bearer {spec.job_token}"),)
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=auth)
        train("Blessed are the peacemakers.")  # after the build's export: not among its pairs
        assert corpus_size() == 3
        completed = platform_pb2.BuildCompletedRequest(
            build_id=spec.build_id, corpus_size=10, confidence=40.0
        )
        job.BuildCompleted(completed, metadata=auth)
        assert corpus_size() == 10 + 1, "the job's 10 pairs and the segment trained while it ran"
        train("Jesus wept.")
        assert corpus_size() == 12, "a segment trained again counts again, as in Serval"
