"""Traversal and odd strings at every client input that can become part of a model store key or a
file path, over REST and gRPC, against a real API service on a local folder store and on S3
(moto): each is refused (400 / INVALID_ARGUMENT) before anything is recorded or queued, no answer
names the store's location, and nothing outside the store's root or prefix is read or written.
Another owner's published revision is the target of the original hole: `{"baseModel":
"../models/<their engine>/<rev>"}` published their weights as the caller's revision."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import ApiSettings, Settings, StoreSettings
from serval_common.store import ModelStore, open_store
from tests.api.conftest import MAX_SEGMENT_CHARS, RunningApi, create_engine
from tests.path_attacks import (
    TRAVERSALS,
    FileSystemWatch,
    S3Watch,
    bucket_state,
    folder_state,
    paused,
    watch_file_system,
    watch_s3,
)

PREFIX = "serval"
SECRET = b"another owner's fine-tuned weights"


@dataclass
class Deployment:
    api: RunningApi
    store: ModelStore
    tmp: Path
    outside: Path
    files: FileSystemWatch
    s3: S3Watch
    a: httpx.Client
    b: httpx.Client
    their_engine: str
    their_file: str
    endpoint: str = ""
    bucket: str = ""

    @property
    def store_root(self) -> Path:
        return self.tmp / "store"

    def state(self) -> object:
        with paused(self.files):
            local = folder_state(self.outside)
            if not self.bucket:
                return local, folder_state(self.store_root)
            return local, bucket_state(self.endpoint, self.bucket)

    def assert_contained(self) -> None:
        assert self.files.touched(self.outside) == []
        assert self.s3.outside(self.bucket, PREFIX) == []

    def refused(self, response: httpx.Response, *fields: str) -> None:
        assert response.status_code == 400, response.text
        message = response.json()["message"]
        assert str(self.tmp) not in message and self.store.url not in message, message
        for name in fields:
            assert name in message, message

    def grpc_refused(self, call: Any, request: Any) -> str:
        key = self.a.headers["X-API-Key"]
        with pytest.raises(grpc.RpcError) as refused:
            call(request, metadata=(("x-api-key", key),))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
        details: str = refused.value.details()
        assert str(self.tmp) not in details and self.store.url not in details
        return details


@pytest.fixture(params=["local", "s3"], name="d")
def deployment(request: pytest.FixtureRequest, tmp_path: Path, database_url: str) -> Iterator[Deployment]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    endpoint = bucket = ""
    if request.param == "local":
        store_settings = StoreSettings(url=(tmp_path / "store").as_uri())
    else:
        endpoint = request.getfixturevalue("moto_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        seed = boto3.client("s3", endpoint_url=endpoint)
        for key in ("other/secret", "secret", "servalx/secret", "outside/secret"):
            seed.put_object(Bucket=bucket, Key=key, Body=SECRET)
        store_settings = StoreSettings(url=f"s3://{bucket}/{PREFIX}", s3_endpoint_url=endpoint)
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        store=store_settings,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, max_segment_chars=MAX_SEGMENT_CHARS),
    )
    with ExitStack() as stack:
        files = stack.enter_context(watch_file_system())
        s3 = stack.enter_context(watch_s3())
        api = RunningApi(settings)
        stack.callback(api.close)
        store = open_store(settings.resolved_store_url, endpoint_url=endpoint or None)
        a = stack.enter_context(api.client("owner-a", ALL_SCOPES))
        b = stack.enter_context(api.client("owner-b", ALL_SCOPES))
        their_engine = create_engine(b)["id"]
        weights = tmp_path / "their-weights"
        weights.mkdir()
        (weights / "model.bin").write_bytes(SECRET)
        publish_folder(
            store,
            f"models/{their_engine}/1",
            weights,
            Manifest(kind="model-revision", engine_id=their_engine, revision=1),
        )
        tiny = tmp_path / "tiny"
        tiny.mkdir()
        (tiny / "model.bin").write_bytes(b"tiny")
        publish_folder(store, "base-models/tiny", tiny, Manifest(kind="base-model", name="tiny"))
        their_file = upload(b, "THEIRS.txt", SECRET + b"\n").json()["id"]
        yield Deployment(
            api, store, tmp_path, outside, files, s3, a, b, their_engine, their_file, endpoint, bucket
        )


def upload(client: httpx.Client, name: str | None, data: bytes, filename: str = "f.txt") -> httpx.Response:
    form = {"format": "Text"} if name is None else {"format": "Text", "name": name}
    return client.post("/files", data=form, files={"file": (filename, data)})


def start_build(client: httpx.Client, engine_id: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(f"/translation/engines/{engine_id}/builds", json=body)


def test_base_model_option_cannot_name_anything_but_a_published_base_model(d: Deployment) -> None:
    engine = create_engine(d.a)["id"]
    their_revision = f"../models/{d.their_engine}/1"
    fake = d.tmp / "fake"
    fake.mkdir()
    (fake / "model.bin").write_bytes(b"x")
    publish_folder(d.store, "base-models/not-a-base", fake, Manifest(kind="model-revision"))
    before = d.state()
    names = (
        *TRAVERSALS,
        their_revision,
        f"tiny/../../models/{d.their_engine}/1",
        "a..b",
        "x" * 101,
        "no-such-model",
        "not-a-base",
        d.their_engine,
    )
    for name in names:
        for body in ({"trainOn": []}, {}):
            d.refused(start_build(d.a, engine, {**body, "options": {"baseModel": name}}), "baseModel")
        details = d.grpc_refused(
            engine_pb2_grpc.TranslationEngineApiStub(d.api.channel).StartBuild,
            engine_pb2.StartBuildRequest(
                engine_type="Nmt", engine_id=engine, options=f'{{"baseModel": {_json(name)}}}'
            ),
        )
        assert "baseModel" in details
    assert d.a.get(f"/translation/engines/{engine}/builds").json() == []
    assert d.api.launcher.specs == []
    d.assert_contained()
    assert d.state() == before

    response = start_build(d.a, engine, {"trainOn": [], "options": {"baseModel": "tiny"}})
    assert response.status_code == 201, response.text
    assert '"baseModel": "tiny"' in d.api.launcher.specs[-1].options_json


def _json(value: str) -> str:
    import json

    return json.dumps(value)


FILENAME_ATTACKS = ("../x", "/etc/passwd", "..\\x", "a/../../b", "．．／x", "%2e%2e/x", "..")


def test_file_names_text_ids_and_corpus_names_must_be_names(d: Deployment) -> None:
    engine = create_engine(d.a)["id"]
    good = upload(d.a, "MAT.txt", b"In the beginning\n")
    assert good.status_code == 201, good.text
    file_id = good.json()["id"]
    before = d.state()
    files_before = d.a.get("/files").json()
    for attack in TRAVERSALS:
        d.refused(upload(d.a, attack, b"x\n"), "name")
        d.refused(
            d.a.post("/corpora", json={"language": "en", "files": [{"fileId": file_id, "textId": attack}]}),
            "textId",
        )
        d.refused(d.a.post("/corpora", json={"name": attack, "language": "en", "files": []}), "name")
        d.refused(
            d.a.post(
                f"/translation/engines/{engine}/parallel-corpora",
                json={"name": attack, "sourceCorpusIds": [], "targetCorpusIds": []},
            ),
            "name",
        )
        for body in (
            {"name": attack, "sourceLanguage": "en", "targetLanguage": "sw"},
            {
                "sourceLanguage": "en",
                "targetLanguage": "sw",
                "sourceFiles": [{"fileId": file_id, "textId": attack}],
            },
        ):
            d.refused(d.a.post(f"/translation/engines/{engine}/corpora", json=body))
        for field in ("trainOn", "pretranslate"):
            entries = [
                {"corpusId": "c", "textIds": [attack]},
                {"parallelCorpusId": "p", "sourceFilters": [{"corpusId": "c", "textIds": [attack]}]},
            ]
            for entry in entries:
                d.refused(start_build(d.a, engine, {field: [entry]}), "textIds")
    for filename in FILENAME_ATTACKS:
        d.refused(upload(d.a, None, b"x\n", filename=filename), "name")
    assert d.a.get("/files").json() == files_before
    assert d.a.get("/corpora").json() == []
    assert d.a.get(f"/translation/engines/{engine}/parallel-corpora").json() == []
    assert d.a.get(f"/translation/engines/{engine}/corpora").json() == []
    assert d.a.get(f"/translation/engines/{engine}/builds").json() == []
    assert d.api.launcher.specs == []
    d.assert_contained()
    assert d.state() == before


def test_grpc_ids_locations_and_text_ids_must_be_clean(d: Deployment) -> None:
    stub = engine_pb2_grpc.TranslationEngineApiStub(d.api.channel)
    engine = create_engine(d.a)["id"]
    mine = upload(d.a, "MAT.txt", b"In the beginning\n").json()["id"]
    before = d.state()

    def corpora(location: str, text_id: str = "MAT", corpus_id: str = "s") -> list[engine_pb2.ParallelCorpus]:
        def side(cid: str, language: str, loc: str) -> engine_pb2.MonolingualCorpus:
            return engine_pb2.MonolingualCorpus(
                id=cid,
                language=language,
                train_on_all=True,
                files=[
                    engine_pb2.CorpusFile(location=loc, format=engine_pb2.FILE_FORMAT_TEXT, text_id=text_id)
                ],
            )

        return [
            engine_pb2.ParallelCorpus(
                id="pc",
                source_corpora=[side(corpus_id, "en", f"files/{mine}")],
                target_corpora=[side("t", "sw", location)],
            )
        ]

    def start(**fields: Any) -> engine_pb2.StartBuildRequest:
        return engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=engine, **fields)

    for attack in TRAVERSALS:
        details = d.grpc_refused(
            stub.Create,
            engine_pb2.CreateRequest(
                engine_type="Nmt", engine_id=attack, source_language="en", target_language="sw"
            ),
        )
        assert "engineId" in details
        assert "buildId" in d.grpc_refused(stub.StartBuild, start(build_id=attack))
        assert "text_id" in d.grpc_refused(
            stub.StartBuild, start(corpora=corpora(f"files/{mine}", text_id=attack))
        )
        assert ".id" in d.grpc_refused(
            stub.StartBuild, start(corpora=corpora(f"files/{mine}", corpus_id=attack))
        )
    locations = (
        *TRAVERSALS,
        f"files/{d.their_file}",
        f"files/{d.their_file}/contents",
        f"files/../models/{d.their_engine}/1/model.bin",
        f"models/{d.their_engine}/1/model.bin",
        "files/../../outside/secret",
        str(d.outside / "secret"),
        "files/%2e%2e",
        "files/．．",
        f"files/{mine}/../{d.their_file}",
    )
    for location in locations:
        d.grpc_refused(stub.StartBuild, start(corpora=corpora(location)))
    assert d.a.get(f"/translation/engines/{engine}/builds").json() == []
    assert [e["id"] for e in d.a.get("/translation/engines").json()] == [engine]
    assert d.api.launcher.specs == []
    d.assert_contained()
    assert d.state() == before
    assert os.path.exists(d.outside / "secret")
