"""No client-visible text names the model store's URL, its credentials or a local path, over REST
and gRPC, while the log keeps the full text under the error id the client is shown.

Real parts throughout: an S3 store on moto with its own access keys, a local-folder store, a
real API service, nodes played over the real node stream.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import grpc
import httpx
import pytest
from google.protobuf import empty_pb2

from serval.health.v1 import health_pb2_grpc
from serval.inference.v1 import node_pb2
from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_api.auth import ADMIN, ALL_SCOPES
from serval_api.errors import UNAVAILABLE_MESSAGE
from serval_api.service import status
from serval_common.settings import ApiSettings, Settings, StoreSettings
from serval_common.store import store_from_settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.file_rows import set_chunks
from tests.api.test_build_export import ENG_MAT, SWH_MAT, corpus, parallel_corpus, text
from tests.api.test_node_protocol import ScriptedNode, _complete_build, new_node_token, wait_until
from tests.helpers import free_port

ACCESS_KEY = "AKIASERVALSECRETS001"
SECRET_KEY = "s3-secret-key-never-shown-to-clients"
PREFIX = "private-prefix-7f3a"
ERROR_ID = re.compile(r"error id ([0-9a-f]{12})")


def error_id(message: str) -> str:
    found = ERROR_ID.search(message)
    assert found, f"no error id in {message!r}"
    return found.group(1)


def logged(caplog: pytest.LogCaptureFixture, error_id: str) -> str:
    """The full error text the log holds under `error_id`."""
    texts = [str(getattr(r, "error", "")) for r in caplog.records if getattr(r, "error_id", None) == error_id]
    assert texts, f"nothing logged under error id {error_id}"
    return "\n".join(texts)


def assert_clean(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} reached a client: {text!r}"


def grpc_key(api: RunningApi, *scopes: str) -> tuple[tuple[str, str]]:
    return (("x-api-key", api.api_key(scopes=scopes or ALL_SCOPES)),)


@pytest.fixture
def s3_api(tmp_path: Path, database_url: str, moto_endpoint: str, s3_bucket: str) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
        store=StoreSettings(
            url=f"s3://{s3_bucket}/{PREFIX}",
            s3_endpoint_url=moto_endpoint,
            s3_region="us-east-1",
            s3_access_key_id=ACCESS_KEY,
            s3_secret_access_key=SECRET_KEY,
        ),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def start_build_everywhere(api: RunningApi, client: httpx.Client, engine_id: str) -> tuple[str, str]:
    """Start a build over REST and over gRPC; both must be refused: (REST message, gRPC details)."""
    rest = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert rest.status_code == 400, rest.text
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    with pytest.raises(grpc.RpcError) as refused:
        stub.StartBuild(
            engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=engine_id), metadata=grpc_key(api)
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return rest.json()["message"], refused.value.details() or ""


@pytest.mark.timeout(120)
def test_s3_store_failures_show_clients_an_error_id_and_the_log_the_rest(
    s3_api: RunningApi,
    moto_endpoint: str,
    s3_bucket: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    endpoint_host = moto_endpoint.removeprefix("http://")
    secrets = (s3_bucket, PREFIX, endpoint_host, ACCESS_KEY, SECRET_KEY, "s3://")
    with s3_api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client)
        source = corpus(client, "en", {"MAT.txt": text(ENG_MAT)})
        target = corpus(client, "sw", {"MAT.txt": text(SWH_MAT)})
        parallel_corpus(client, engine["id"], source, target)

        # Files uploaded before contents moved to the database, whose store objects are gone.
        old_files = [f["id"] for f in client.get("/files").json()]
        for file_id in old_files:
            set_chunks(s3_api, file_id)
        s3 = boto3.client("s3", endpoint_url=moto_endpoint)
        assert "Contents" not in s3.list_objects_v2(Bucket=s3_bucket, Prefix=f"{PREFIX}/files/")

        for message in start_build_everywhere(s3_api, client, engine["id"]):
            assert "cannot be read" in message
            assert_clean(message, *secrets)
            full = logged(caplog, error_id(message))
            assert s3_bucket in full and PREFIX in full, "the log names what failed"

        # The store becomes unreachable: reading an old file's contents answers 503 (as Serval
        # answers an outage), the health check fails; an upload needs no store.
        assert s3_api.service.services is not None
        closed = f"127.0.0.1:{free_port()}"
        services = s3_api.service.services
        services.settings.store.s3_endpoint_url = f"http://{closed}"
        services.settings.store.s3_max_attempts = 1
        services.store = store_from_settings(services.settings)  # the service's store, now unreachable
        secrets += (closed,)

        upload = client.post("/files", data={"format": "Text"}, files={"file": ("a.txt", b"a\n")})
        assert upload.status_code == 201, upload.text
        download = client.get(f"/files/{old_files[0]}/contents")
        assert download.status_code == 503, download.text
        assert_clean(download.text, *secrets)
        assert download.json()["message"].startswith(f"{UNAVAILABLE_MESSAGE} (error id ")
        assert download.headers["retry-after"]
        assert closed in logged(caplog, error_id(download.json()["message"]))

        health = client.get("/status/health")
        assert health.status_code == 503
        assert health.json()["results"]["modelStore"]["exception"].startswith("StoreUnavailable")
        assert_clean(health.text, *secrets)
    report = health_pb2_grpc.HealthApiStub(s3_api.channel).HealthCheck(empty_pb2.Empty())
    assert report.error.startswith("modelStore: StoreUnavailable")
    assert_clean(str(report), *secrets)
    assert any(
        closed in str(getattr(r, "error", "")) for r in caplog.records if r.msg == "health check failed"
    )


def test_a_local_store_path_reaches_no_client(
    api: RunningApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client)
        source = corpus(client, "en", {"MAT.txt": text(ENG_MAT)})
        target = corpus(client, "sw", {"MAT.txt": text(SWH_MAT)})
        parallel_corpus(client, engine["id"], source, target)
        for file in client.get("/files").json():
            set_chunks(api, file["id"])  # uploaded before contents moved to the database, and gone
        for message in start_build_everywhere(api, client, engine["id"]):
            assert_clean(message, str(tmp_path), "file://")
            assert str(tmp_path) in logged(caplog, error_id(message))


def test_an_unexpected_error_is_internal_with_an_error_id_over_rest_and_grpc(
    api: RunningApi, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gRPC would send the exception's text (UNKNOWN, "Unexpected <class …>: …") and FastAPI a bare
    500; both answer with an error id the log holds the text under."""
    leaked = f"[Errno 13] Permission denied: '{tmp_path}/store/builds'"

    def broken(*_args: Any) -> Any:
        raise PermissionError(leaked)

    monkeypatch.setattr(status, "queue_size", broken)
    with api.client() as client:
        rest = client.get("/translation/engine-types/nmt/queues")
    assert rest.status_code == 500
    assert_clean(rest.text, str(tmp_path))
    assert leaked in logged(caplog, error_id(rest.json()["message"]))

    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    with pytest.raises(grpc.RpcError) as failed:
        stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="Nmt"), metadata=grpc_key(api))
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    details = failed.value.details() or ""
    assert details.startswith("internal error (error id ")
    assert_clean(details, str(tmp_path), "PermissionError")
    assert leaked in logged(caplog, error_id(details))


NODE_STORE = "s3://node-bucket/node-prefix"
NODE_ENDPOINT = "http://10.20.30.40:9000"
NODE_CACHE = "/var/lib/serval/node-cache/models"


def test_node_failure_texts_reach_clients_masked(api: RunningApi, caplog: pytest.LogCaptureFixture) -> None:
    """A node's load failure and work error name its store, endpoint and cache folder; clients
    (translate over REST and gRPC, the admin node list) see them masked, the log in full."""
    caplog.set_level(logging.INFO)
    node_secrets = ("node-bucket", "node-prefix", "10.20.30.40", "/var/lib/serval", "s3://")
    with api.client() as client:
        engine = create_engine(client)
        assert (
            client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []}).status_code
            == 201
        )
        spec = api.launcher.specs[-1]
        _complete_build(api, spec.build_id, spec.job_token)
        other = create_engine(client)
        assert (
            client.post(f"/translation/engines/{other['id']}/builds", json={"trainOn": []}).status_code == 201
        )
        spec = api.launcher.specs[-1]
        _complete_build(api, spec.build_id, spec.job_token)

    node = ScriptedNode(api.grpc_target, new_node_token(api))
    load_failure = (
        f"could not read models/{engine['id']}/1/manifest.json in {NODE_STORE}: Could not connect to the "
        f'endpoint URL: "{NODE_ENDPOINT}/node-bucket/node-prefix/models/{engine["id"]}/1/manifest.json"'
    )
    work_failure = f"OSError: [Errno 28] No space left on device: '{NODE_CACHE}/{other['id']}/1/model.bin'"
    try:
        node.hello()
        node.read()
        node.keep_alive()
        with api.client() as client:
            pending = client.build_request("POST", f"/translation/engines/{engine['id']}/translate", json="a")
            answers: list[httpx.Response] = []
            sender = threading.Thread(target=lambda: answers.append(client.send(pending)))
            sender.start()
            load = node.read().load_model.model
            node.send(
                model_status=node_pb2.ModelStatus(
                    model=load, state=node_pb2.MODEL_STATE_FAILED, message=load_failure
                )
            )
            sender.join(30)
            [refused] = answers
            assert refused.status_code == 503, refused.text
            assert "could not read" in refused.json()["message"]
            assert_clean(refused.text, *node_secrets)

            with api.client(scopes=(ADMIN,)) as admin:
                wait_until(
                    lambda: any(
                        m["state"] == "failed" for n in admin.get("/admin/nodes").json() for m in n["models"]
                    )
                )
                listed = admin.get("/admin/nodes").text
            assert "manifest.json" in listed
            assert_clean(listed, *node_secrets)

            second = threading.Thread(
                target=lambda: answers.append(
                    client.post(f"/translation/engines/{other['id']}/translate", json="b")
                )
            )
            second.start()
            load = node.read().load_model.model
            node.send(model_status=node_pb2.ModelStatus(model=load, state=node_pb2.MODEL_STATE_READY))
            item = node.read().work
            node.send(
                result=node_pb2.WorkResult(
                    request_id=item.request_id,
                    error=node_pb2.WorkError(code=node_pb2.WORK_ERROR_CODE_INTERNAL, message=work_failure),
                )
            )
            second.join(30)
            failed = answers[-1]
            assert failed.status_code == 503, failed.text
            assert "No space left on device" in failed.json()["message"]
            assert_clean(failed.text, *node_secrets)

            stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
            metadata = grpc_key(api)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                call = pool.submit(
                    stub.Translate,
                    engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=other["id"], segment="c"),
                    metadata=metadata,
                )
                item = node.read().work
                node.send(
                    result=node_pb2.WorkResult(
                        request_id=item.request_id,
                        error=node_pb2.WorkError(
                            code=node_pb2.WORK_ERROR_CODE_INTERNAL, message=work_failure
                        ),
                    )
                )
                with pytest.raises(grpc.RpcError) as over_grpc:
                    call.result(30)
            assert over_grpc.value.code() == grpc.StatusCode.UNAVAILABLE
            assert_clean(over_grpc.value.details() or "", *node_secrets)
    finally:
        node.close()
    full = "\n".join(str(getattr(r, "detail", "")) + str(getattr(r, "error", "")) for r in caplog.records)
    assert load_failure in full and work_failure in full, "the log keeps the nodes' full texts"


def test_a_jobs_fault_message_reaches_clients_masked(
    api: RunningApi, caplog: pytest.LogCaptureFixture
) -> None:
    """A build job reports its exception's text as the fault; clients read the build's message
    over REST and gRPC (WatchBuild) with the job's store URL and paths masked."""
    caplog.set_level(logging.INFO)
    fault = (
        "StoreError: could not upload models/e/1/model.bin in s3://job-bucket/job-prefix: "
        "[Errno 2] No such file or directory: '/scratch/serval-job-1234/ct2/model.bin'"
    )
    with api.client() as client:
        engine = create_engine(client)
        build = client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []}).json()
        spec = api.launcher.specs[-1]
        platform_pb2_grpc.TranslationPlatformApiStub(api.channel).BuildFaulted(
            platform_pb2.BuildFaultedRequest(build_id=spec.build_id, message=fault),
            metadata=(("authorization", f"Bearer {spec.job_token}"),),
        )
        message = client.get(f"/translation/engines/{engine['id']}/builds/{build['id']}").json()["message"]
    assert message.startswith("StoreError: could not upload models/e/1/model.bin in <url>")
    assert_clean(message, "job-bucket", "job-prefix", "/scratch", "s3://")
    updates = engine_pb2_grpc.TranslationEngineApiStub(api.channel).WatchBuild(
        engine_pb2.WatchBuildRequest(engine_type="Nmt", engine_id=engine["id"], build_id=build["id"]),
        metadata=grpc_key(api),
        timeout=10,
    )
    first = next(iter(updates))
    assert "<url>" in str(first), first
    assert_clean(str(first), "job-bucket", "job-prefix", "/scratch", "s3://")
    assert any(getattr(r, "error", None) == fault for r in caplog.records), "the log keeps the job's text"
