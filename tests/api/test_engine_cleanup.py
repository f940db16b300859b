"""Deleting leaves nothing behind: an engine's model revisions, build files and pretranslations go
with it (after its running build is canceled and the nodes serving it have finished and unloaded
it), and deleted data files take their store objects with them. The store is counted before the
engine and its files existed and after they are gone; the base model is never touched."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from serval.inference.v1 import node_pb2
from serval_api.auth import ALL_SCOPES
from serval_api.db.models import BuildRow, PretranslationRow
from serval_common.settings import ApiSettings, Settings, StoreSettings
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi
from tests.api.test_node_admin import ObedientNode
from tests.api.test_node_protocol import fast_heartbeat_api, new_node_token, wait_until
from tests.api.test_pretranslations import start_build, text_engine, translated

TOP_FOLDERS = ("base-models", "models", "builds", "files")


@pytest.fixture
def api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    with fast_heartbeat_api(tmp_path, database_url) as running:
        yield running


def store_of(api: RunningApi) -> ModelStore:
    assert api.service.services is not None
    return api.service.services.store


def all_keys(store: ModelStore) -> list[str]:
    return sorted(key for top in TOP_FOLDERS for key in store.list_keys(top))


def with_base_model(store: ModelStore) -> list[str]:
    store.write_bytes("base-models/tiny/model.bin", b"base weights")
    store.write_bytes("base-models/tiny/manifest.json", b"{}")
    return all_keys(store)


def publish_revision(store: ModelStore, engine_id: str, revision: int) -> None:
    """What a build job publishes (its contents do not matter here)."""
    store.write_bytes(f"models/{engine_id}/{revision}/model.bin", b"fine-tuned weights")
    store.write_bytes(f"models/{engine_id}/{revision}/manifest.json", b"{}")


def rows(api: RunningApi, model: type[BuildRow] | type[PretranslationRow], engine_id: str) -> int:
    assert api.service.services is not None
    db = api.service.services.db

    async def count() -> int:
        async with db.session() as s:
            query = select(func.count()).select_from(model).where(model.engine_id == engine_id)
            return int(await s.scalar(query) or 0)

    return api.run(count())


def delete_files_and_corpora(client: httpx.Client) -> None:
    for corpus in client.get("/corpora").json():
        assert client.delete(f"/corpora/{corpus['id']}").status_code == 200
    for file in client.get("/files").json():
        assert client.delete(f"/files/{file['id']}").status_code == 200


def engine_with_history(api: RunningApi, client: httpx.Client, store: ModelStore) -> tuple[str, str]:
    """An engine with a completed build (revision 1 published, pretranslations stored) and a second
    build running; its id and the running build's."""
    engine_id, pc_id = text_engine(client)
    done = start_build(api, client, engine_id, pc_id)
    assert done.insert(translated(done.source_rows(), "first")) > 0
    publish_revision(store, engine_id, 1)
    done.completed()
    running = start_build(api, client, engine_id, pc_id)
    assert rows(api, PretranslationRow, engine_id) > 0
    assert {f"builds/{done.build_id}", f"builds/{running.build_id}", f"models/{engine_id}/1"} <= {
        key.rsplit("/", 1)[0] for key in all_keys(store)
    }
    return engine_id, running.build_id


def test_an_engine_leaves_the_store_after_the_node_serving_it_unloads_it(api: RunningApi) -> None:
    store = store_of(api)
    before = with_base_model(store)
    node = None
    with api.client(scopes=ALL_SCOPES) as owner, api.client(scopes=ALL_SCOPES) as translator:
        engine_id, running_build = engine_with_history(api, owner, store)
        location = f"models/{engine_id}/1"
        node = ObedientNode(api.grpc_target, new_node_token(api), "gpu-1")
        try:
            node.keep_alive()
            node.ready(location)
            fleet = api.service.services.fleet if api.service.services else None
            assert fleet is not None
            wait_until(lambda: any(s.model_state(location) for s in fleet.sessions().values()))
            with ThreadPoolExecutor(2) as pool:
                translation = pool.submit(
                    translator.post, f"/translation/engines/{engine_id}/translate", json="verse", timeout=30
                )
                work = node.expect("work")
                deleting = pool.submit(owner.delete, f"/translation/engines/{engine_id}", timeout=60)
                assert node.expect("unload_model").model.location == location
                time.sleep(0.5)
                assert not deleting.done(), "the delete waits for the node to finish and unload"
                assert f"{location}/model.bin" in all_keys(store), "no file pulled from under the node"
                assert owner.get(f"/translation/engines/{engine_id}").status_code == 404

                result = node_pb2.TranslationResult(translation="served")
                node.send(
                    result=node_pb2.WorkResult(
                        request_id=work.request_id, translate=node_pb2.TranslateOutput(results=[result])
                    )
                )
                assert translation.result(10).status_code == 200, "work in flight finishes"
                ref = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=location)
                node.send(model_status=node_pb2.ModelStatus(model=ref, state=node_pb2.MODEL_STATE_UNLOADED))
                assert deleting.result(10).status_code == 200
        finally:
            node.close()

        assert api.launcher.canceled == [running_build], "the running build is canceled"
        assert rows(api, PretranslationRow, engine_id) == rows(api, BuildRow, engine_id) == 0
        assert not [key for key in all_keys(store) if key.startswith(("models/", "builds/"))]
        assert owner.post(f"/translation/engines/{engine_id}/translate", json="verse").status_code == 404
        delete_files_and_corpora(owner)
    assert all_keys(store) == before


def test_without_nodes_an_engine_on_s3_leaves_nothing(
    tmp_path: Path, database_url: str, moto_endpoint: str, s3_bucket: str
) -> None:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        store=StoreSettings(url=f"s3://{s3_bucket}/serval", s3_endpoint_url=moto_endpoint),
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
    )
    api = RunningApi(settings)
    try:
        store = store_of(api)
        before = with_base_model(store)
        with api.client(scopes=ALL_SCOPES) as owner:
            engine_id, running_build = engine_with_history(api, owner, store)
            since = time.monotonic()
            assert owner.delete(f"/translation/engines/{engine_id}").status_code == 200
            # Waiting for a node would take request_timeout_s + heartbeat_interval_s (32 s).
            assert time.monotonic() - since < 25, "with no node holding it, nothing to wait for"
            assert api.launcher.canceled == [running_build]
            assert not [key for key in all_keys(store) if key.startswith(("models/", "builds/"))]
            delete_files_and_corpora(owner)
        assert all_keys(store) == before
    finally:
        api.close()
