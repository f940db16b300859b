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

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
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
    assert info.internal_code == "swh_Latn"


def test_engine_type_endpoints(api: RunningApi) -> None:
    with api.client() as client:
        for name in ("smt-transfer", "SmtTransfer"):
            queue = client.get(f"/translation/engine-types/{name}/queues")
            assert queue.status_code == 200
            assert queue.json() == {"size": 0, "engineType": "smt-transfer"}
        language = client.get("/translation/engine-types/smt-transfer/languages/sw")
        assert language.status_code == 200
        assert language.json()["engineType"] == "smt-transfer"
        assert language.json()["internalCode"] == "swh_Latn"
        for path in ("queues", "languages/en"):
            assert client.get(f"/translation/engine-types/statistical/{path}").status_code == 405


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
