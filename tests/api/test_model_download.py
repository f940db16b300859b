from __future__ import annotations

import io
import tarfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2
from serval_api.auth import ALL_ENGINE_SCOPES, Caller
from serval_api.service import downloads
from serval_common.manifest import Manifest, publish_folder
from serval_common.store import store_from_settings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.test_platform_api import as_job, job_stub


def publish_revision(api: RunningApi, engine_id: str, tmp_path: Path) -> dict[str, bytes]:
    """A base model with two files, and revision 1 of the engine reusing its weights."""
    files = {"model.bin": b"\x01weights" * 100_000, "shared_vocabulary.json": b'["a", "b"]'}
    folder = tmp_path / "base"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    store = store_from_settings(api.service.settings)
    publish_folder(store, "base-models/tiny", folder, Manifest(kind="base-model", name="tiny"))
    revision = Manifest(
        kind="model-revision", engine_id=engine_id, revision=1, weights_from="base-models/tiny"
    )
    publish_folder(store, f"models/{engine_id}/1", None, revision)
    return files


def built_engine(api: RunningApi, client: httpx.Client) -> dict[str, Any]:
    """An nmt engine whose first build has completed (its job reports through the platform API)."""
    engine = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    job_stub(api).BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=build["id"], corpus_size=1, confidence=1),
        metadata=as_job(api),
    )
    return engine


def local(api: RunningApi, url: str) -> str:
    return f"{api.rest_url}{urlparse(url).path}"


def test_download_url_streams_the_model_archive(
    api: RunningApi, client: httpx.Client, tmp_path: Path
) -> None:
    unbuilt = create_engine(client)
    refused = client.get(f"/translation/engines/{unbuilt['id']}/model-download-url")
    assert refused.status_code == 404 and "no model" in refused.json()["message"]
    engine = built_engine(api, client)
    base = f"/translation/engines/{engine['id']}"
    files = publish_revision(api, engine["id"], tmp_path)

    answer = client.get(f"{base}/model-download-url")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["modelRevision"] == 1
    assert 3500 < _seconds_until(body["expiresAt"]) <= 3601
    download = httpx.get(local(api, body["url"]))
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as archive:
        contents = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    assert {k: v for k, v in contents.items() if k != "manifest.json"} == files
    manifest = Manifest.model_validate_json(contents["manifest.json"])
    assert (manifest.engine_id, manifest.revision) == (engine["id"], 1)

    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    reply = stub.GetModelDownloadUrl(
        engine_pb2.GetModelDownloadUrlRequest(engine_type="Nmt", engine_id=engine["id"]),
        metadata=(("x-api-key", api.api_key()),),
    )
    assert reply.model_revision == 1 and reply.expires_at.seconds > time.time() + 3500
    assert httpx.get(local(api, reply.url)).status_code == 200


def test_expired_and_tampered_tokens_are_refused(
    api: RunningApi, client: httpx.Client, tmp_path: Path
) -> None:
    engine = built_engine(api, client)
    publish_revision(api, engine["id"], tmp_path)
    url = client.get(f"/translation/engines/{engine['id']}/model-download-url").json()["url"]
    token = urlparse(url).path.rsplit("/", 1)[1]
    body, _, mac = token.partition(".")
    tampered = f"{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{mac}"
    for bad in (tampered, f"{body}.", "garbage", "a.b.c"):
        answer = httpx.get(f"{api.rest_url}/api/v1/model-downloads/{bad}")
        assert answer.status_code == 403, bad
        assert "invalid" in answer.json()["message"]

    secret = downloads._secret(api.service.settings)
    expired = downloads.sign({"engineId": engine["id"], "revision": 1, "exp": int(time.time()) - 1}, secret)
    answer = httpx.get(f"{api.rest_url}/api/v1/model-downloads/{expired}")
    assert answer.status_code == 403 and "expired" in answer.json()["message"]

    missing = downloads.sign({"engineId": engine["id"], "revision": 7, "exp": int(time.time()) + 60}, secret)
    assert httpx.get(f"{api.rest_url}/api/v1/model-downloads/{missing}").status_code == 404


def test_a_tiny_ttl_expires(api: RunningApi, client: httpx.Client, tmp_path: Path) -> None:
    engine = built_engine(api, client)
    publish_revision(api, engine["id"], tmp_path)
    services = api.service.services
    assert services is not None
    caller = Caller(owner="owner-a", scopes=frozenset(ALL_ENGINE_SCOPES))
    url = api.run(downloads.model_download_url(services, caller, engine["id"], ttl_s=1))
    assert httpx.get(local(api, url.url)).status_code == 200
    time.sleep(2.05)
    assert httpx.get(local(api, url.url)).status_code == 403


def test_an_echo_engine_answers_a_placeholder_url(api: RunningApi, client: httpx.Client) -> None:
    """Serval's echo engine service answers its model URL with a placeholder (`https://example.com/model`,
    EchoTranslationEngineService); so does ours, once built: before, 404 as for any engine."""
    engine = create_engine(client, "echo")
    url = f"/translation/engines/{engine['id']}/model-download-url"
    assert client.get(url).status_code == 404
    wait_for_build(client, client.post(f"/translation/engines/{engine['id']}/builds", json={}).json())
    assert client.get(f"/translation/engines/{engine['id']}").json()["modelRevision"] == 1
    answer = client.get(url)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["url"], answer.json()["modelRevision"]) == (downloads.ECHO_MODEL_URL, 1)
    assert 0 < _seconds_until(answer.json()["expiresAt"]) <= 3601
    reply = engine_pb2_grpc.TranslationEngineApiStub(api.channel).GetModelDownloadUrl(
        engine_pb2.GetModelDownloadUrlRequest(engine_type="Echo", engine_id=engine["id"]),
        metadata=(("x-api-key", api.api_key()),),
    )
    assert (reply.url, reply.model_revision) == (downloads.ECHO_MODEL_URL, 1)


def _seconds_until(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - time.time()
