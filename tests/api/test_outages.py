"""A dependency down answers as Serval's `ServiceUnavailableExceptionFilter` does: 503 ("a
necessary service is currently unavailable"), here with `Retry-After`, and UNAVAILABLE over gRPC;
never 500. The outages are real: the SQLite database's folder taken away (pooled connections
closed first), and a private S3 server (moto) stopped mid-run."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.errors import UNAVAILABLE_MESSAGE
from serval_common.settings import ApiSettings, Settings, StoreSettings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.helpers import free_port, start_moto_server


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["message"].startswith(UNAVAILABLE_MESSAGE)
    assert int(response.headers["retry-after"]) >= 1


def grpc_code(call: object, request: object, key: str) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as refused:
        call(request, metadata=(("x-api-key", key),))  # type: ignore[operator]
    error = refused.value
    assert UNAVAILABLE_MESSAGE in error.details()  # type: ignore[attr-defined]
    code: grpc.StatusCode = error.code()  # type: ignore[attr-defined]
    return code


def api_settings() -> ApiSettings:
    return ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, store_sweep_interval_s=0)


@pytest.fixture
def sqlite_api(tmp_path: Path) -> Iterator[RunningApi]:
    (tmp_path / "db").mkdir()
    settings = Settings(
        home=tmp_path, database_url=f"sqlite+aiosqlite:///{tmp_path / 'db' / 'serval.db'}", api=api_settings()
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def take_the_database_away(api: RunningApi, tmp_path: Path) -> None:
    """Close the pooled connections, then put a plain file where the database's folder was: no
    connection can be opened any more."""
    assert api.service.services is not None
    api.run(api.service.services.db.engine.dispose())
    (tmp_path / "db").rename(tmp_path / "db-gone")
    (tmp_path / "db").write_text("not a folder")


def test_the_database_down_answers_503_and_unavailable(sqlite_api: RunningApi, tmp_path: Path) -> None:
    with sqlite_api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client)
        key = client.headers["X-API-Key"]
        take_the_database_away(sqlite_api, tmp_path)
        assert_unavailable(client.get(f"/translation/engines/{engine['id']}"))
        assert_unavailable(
            client.post(
                "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "echo"}
            )
        )
        assert_unavailable(client.get("/corpora"))
        stub = engine_pb2_grpc.TranslationEngineApiStub(sqlite_api.channel)
        create = engine_pb2.CreateRequest(
            engine_type="Echo", engine_id="e1", source_language="en", target_language="sw"
        )
        assert grpc_code(stub.Create, create, key) == grpc.StatusCode.UNAVAILABLE

        (tmp_path / "db").unlink()
        (tmp_path / "db-gone").rename(tmp_path / "db")
        assert client.get(f"/translation/engines/{engine['id']}").status_code == 200, "back once it is"


@pytest.fixture
def s3_api(tmp_path: Path) -> Iterator[tuple[RunningApi, subprocess.Popen[bytes]]]:
    """An API service whose model store is a private moto server, which the test may stop."""
    port = free_port()
    server = start_moto_server(port)
    running = None
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        ).create_bucket(Bucket="outage")
        store = StoreSettings(
            url="s3://outage/serval",
            s3_endpoint_url=endpoint,
            s3_region="us-east-1",
            s3_access_key_id="test",
            s3_secret_access_key="test",
        )
        settings = Settings(
            home=tmp_path,
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'serval.db'}",
            store=store,
            api=api_settings(),
        )
        running = RunningApi(settings)
        yield running, server
    finally:
        if running is not None:
            running.close()
        server.terminate()
        server.wait(timeout=10)


def test_the_model_store_down_faults_builds_and_leaves_files_working(
    s3_api: tuple[RunningApi, subprocess.Popen[bytes]],
) -> None:
    api, server = s3_api
    with api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client)
        key = client.headers["X-API-Key"]
        upload = {
            "data": {"format": "Text", "name": "MAT.txt"},
            "files": {"file": ("MAT.txt", b"In the beginning.\n")},
        }
        uploaded = client.post("/files", **upload)  # type: ignore[arg-type]
        assert uploaded.status_code == 201, uploaded.text
        file_id = uploaded.json()["id"]
        corpus = client.post("/corpora", json={"language": "en", "files": [{"fileId": file_id}]}).json()
        pc = client.post(
            f"/translation/engines/{engine['id']}/parallel-corpora",
            json={"sourceCorpusIds": [corpus["id"]], "targetCorpusIds": []},
        ).json()

        server.terminate()
        server.wait(timeout=10)

        build = {"trainOn": [], "pretranslate": [{"parallelCorpusId": pc["id"]}]}
        # As Serval (MissingServicesTests.UseMissingAWSAsync): accepted, then Faulted, saying why.
        started = client.post(f"/translation/engines/{engine['id']}/builds", json=build)
        assert started.status_code == 201, started.text
        faulted = wait_for_build(client, started.json())
        assert faulted["state"] == "Faulted", faulted
        assert faulted["message"].startswith("the model store could not be reached"), faulted
        # Data files live in the database, as Serval's beside its records: files need no store.
        assert client.get(f"/files/{file_id}").status_code == 200
        assert client.get(f"/files/{file_id}/contents").content == b"In the beginning.\n"
        second = client.post("/files", **upload)  # type: ignore[arg-type]
        assert second.status_code == 201, second.text
        assert client.get(f"/files/{second.json()['id']}/contents").content == b"In the beginning.\n"
        replaced = client.patch(f"/files/{second.json()['id']}", files={"file": ("MAT.txt", b"Replaced.\n")})
        assert replaced.status_code == 200, replaced.text
        assert client.get(f"/files/{second.json()['id']}/contents").content == b"Replaced.\n"
        assert client.delete(f"/files/{second.json()['id']}").status_code == 200
        assert client.get(f"/files/{second.json()['id']}").status_code == 404

        source = engine_pb2.MonolingualCorpus(
            id="s",
            language="en",
            pretranslate_all=True,
            files=[engine_pb2.CorpusFile(location=f"files/{file_id}", format=engine_pb2.FILE_FORMAT_TEXT)],
        )
        request = engine_pb2.StartBuildRequest(
            engine_type="Nmt",
            engine_id=engine["id"],
            build_id="o" * 24,
            corpora=[engine_pb2.ParallelCorpus(id="drafts", source_corpora=[source])],
        )
        stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
        stub.StartBuild(request, metadata=(("x-api-key", key),))
        faulted = wait_for_build(
            client, client.get(f"/translation/engines/{engine['id']}/builds/{'o' * 24}").json()
        )
        assert faulted["state"] == "Faulted", faulted
