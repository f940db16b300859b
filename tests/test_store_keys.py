"""Store keys, manifest file entries and base model names, on a local folder store and on S3
(moto), attacked with traversal and odd strings: each is refused with a typed error, and nothing
outside the store's root or prefix is read or written: a sentinel folder next to the local store
and sentinel objects beside the S3 prefix stay as they were and are never touched (every file
access of this process and every S3 request is watched)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from build_jobs.publish import publish_inference_only
from inference_gpu.model_manager import ModelManager
from serval.inference.v1 import node_pb2
from serval_api.errors import NotFound
from serval_api.service.downloads import DownloadGrant, open_archive
from serval_common.build_options import BuildOptionsError, NmtBuildOptions
from serval_common.manifest import Manifest as ManifestModel
from serval_common.manifest import (
    ManifestError,
    base_model_folder,
    fetch_folder,
    publish_folder,
    read_manifest,
    sha256_file,
)
from serval_common.model_revision import ModelRevision
from serval_common.names import InvalidName, check_id
from serval_common.settings import Settings, StoreSettings
from serval_common.store import InvalidKey, ModelStore, StoreError, open_store
from serval_common.store.base import shown_key
from tests.path_attacks import (
    STORE_ONLY,
    TRAVERSALS,
    FileSystemWatch,
    S3Watch,
    bucket_state,
    escapes,
    folder_state,
    paused,
    watch_file_system,
    watch_s3,
)

PREFIX = "serval"
SECRET = b"another owner's weights"


@dataclass
class Arena:
    """A store with something to protect beside it, and the watches on it."""

    kind: str
    store: ModelStore
    settings: Settings
    tmp: Path
    files: FileSystemWatch
    s3: S3Watch
    outside: Path
    """A folder next to the local store's root, or next to the work folders of either kind."""
    endpoint: str = ""
    bucket: str = ""

    def state(self) -> object:
        with paused(self.files):
            local = folder_state(self.outside)
            if self.kind == "local":
                return local, folder_state(self.tmp / "store")
            return local, bucket_state(self.endpoint, self.bucket)

    def assert_contained(self) -> None:
        """Nothing outside the store's root or prefix was accessed."""
        assert self.files.touched(self.outside) == []
        assert self.s3.outside(self.bucket, PREFIX) == []


@pytest.fixture(params=["local", "s3"])
def arena(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Arena]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    endpoint = bucket = ""
    with ExitStack() as stack:
        if request.param == "local":
            url = (tmp_path / "store").as_uri()
            store_settings = StoreSettings(url=url)
        else:
            endpoint = request.getfixturevalue("moto_endpoint")
            bucket = request.getfixturevalue("s3_bucket")
            seed = boto3.client("s3", endpoint_url=endpoint)
            for key in ("other/secret", "secret", "servalx/secret", "outside/secret"):
                seed.put_object(Bucket=bucket, Key=key, Body=SECRET)
            url = f"s3://{bucket}/{PREFIX}"
            store_settings = StoreSettings(url=url, s3_endpoint_url=endpoint)
        files = stack.enter_context(watch_file_system())
        s3 = stack.enter_context(watch_s3())
        settings = Settings(home=tmp_path / "home", store=store_settings)
        store = open_store(url, endpoint_url=endpoint or None)
        yield Arena(request.param, store, settings, tmp_path, files, s3, outside, endpoint, bucket)


def attempts(store: ModelStore, key: str, tmp: Path) -> list[tuple[str, Callable[[], Any]]]:
    source = tmp / "upload-source"
    source.write_bytes(b"attack")
    target = tmp / "download-target"
    return [
        ("read_bytes", lambda: store.read_bytes(key)),
        ("write_bytes", lambda: store.write_bytes(key, b"attack")),
        ("upload_file", lambda: store.upload_file(key, source)),
        ("download_file", lambda: store.download_file(key, target)),
        ("iter_bytes", lambda: store.iter_bytes(key)),
        ("exists", lambda: store.exists(key)),
        ("list_keys", lambda: store.list_keys(key)),
        ("delete_prefix", lambda: store.delete_prefix(key)),
    ]


def assert_names_only_the_key(message: str, key: str, arena: Arena) -> None:
    """A refusal quotes the caller's own key as `shown_key` cuts it (whatever folder the key names,
    however long) and then says why, in words that name no location: never the store's root,
    URL or prefix, nor the work folder. Independent of where and how long the temporary folder is."""
    quoted = f"invalid model store key {shown_key(key)}: "
    assert message.startswith(quoted), message
    reason = message.removeprefix(quoted)
    locations = (str(arena.tmp), str(arena.tmp / "store"), arena.store.url, PREFIX, arena.bucket or PREFIX)
    assert reason and not any(place in reason for place in locations), message
    assert "/" not in reason and "\\" not in reason, message


def refuse_everywhere(arena: Arena, keys: tuple[str, ...]) -> None:
    arena.store.write_bytes("models/e1/1/model.bin", b"model")
    before = arena.state()
    sent = len(arena.s3.requests)
    for key in keys:
        for method, call in attempts(arena.store, key, arena.tmp):
            with pytest.raises(InvalidKey) as refused:
                call()
            assert_names_only_the_key(str(refused.value), key, arena), method
    assert len(arena.s3.requests) == sent, "a refused key reached S3"
    assert not (arena.tmp / "download-target").exists()
    arena.assert_contained()
    assert arena.state() == before


@pytest.mark.parametrize("key", TRAVERSALS + STORE_ONLY, ids=ascii)
def test_every_store_method_refuses_a_bad_key(arena: Arena, key: str) -> None:
    refuse_everywhere(arena, (key,))


def test_keys_aimed_at_a_sentinel_beside_the_store_are_refused(arena: Arena) -> None:
    store_root = arena.tmp / "store"
    refuse_everywhere(arena, (*escapes(arena.outside, store_root), "../other/secret", "../servalx/secret"))


def test_odd_but_clean_keys_stay_inside(arena: Arena) -> None:
    keys = ["a..b/c", "é/ü.bin", "a b/c", "x-1.2_3/model.bin", "%41/b"]
    for key in keys:
        arena.store.write_bytes(key, key.encode())
        assert arena.store.read_bytes(key) == key.encode()
        assert arena.store.exists(key)
    assert arena.store.list_keys("a..b") == ["a..b/c"]
    arena.store.delete_prefix("a..b")
    assert not arena.store.exists("a..b/c")
    arena.assert_contained()


BAD_ENTRIES: tuple[str, ...] = (
    "../../x",
    "/etc/passwd",
    "a/../../x",
    "..\\x",
    "a//b",
    "",
    ".",
    "sub/",
    "．．／x",
    "\u2024\u2024/x",
    "a\x00b",
    "../outside/secret",
    "../../outside/secret",
    "x" * 600,
    "manifest.json",
)


def hand_made_manifest(store: ModelStore, prefix: str, **fields: Any) -> None:
    """A manifest.json written straight to the store: no publisher checked it."""
    store.write_bytes(f"{prefix}/model.bin", b"model")
    raw = {
        "kind": "model-revision",
        "engine_id": "e1",
        "revision": 1,
        "files": [{"path": "model.bin", "sha256": "0" * 64, "size": 5}],
        **fields,
    }
    store.write_bytes(f"{prefix}/manifest.json", json.dumps(raw).encode())


def cached_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


@pytest.mark.parametrize("entry", BAD_ENTRIES, ids=ascii)
def test_a_hand_made_manifest_with_a_bad_file_entry_is_refused(arena: Arena, entry: str) -> None:
    hand_made_manifest(
        arena.store, "models/e1/1", files=[{"path": entry, "sha256": "0" * 64, "size": len(SECRET)}]
    )
    before = arena.state()
    with pytest.raises(ManifestError, match="not a valid manifest"):
        read_manifest(arena.store, "models/e1/1")
    with pytest.raises(ManifestError, match="not a valid manifest"):
        fetch_folder(arena.store, "models/e1/1", arena.tmp / "cache")
    assert cached_files(arena.tmp / "cache") == []
    arena.assert_contained()
    assert arena.state() == before


THEIR_REVISION = "models/their-engine/1"

BAD_WEIGHTS_FROM = (
    THEIR_REVISION,
    f"base-models/../{THEIR_REVISION}",
    f"../{THEIR_REVISION}",
    f"/{THEIR_REVISION}",
    "base-models/a..b",
    "base-models/tiny/../../models/their-engine/1",
    "base-models/",
    "../outside",
)


@pytest.mark.parametrize("weights_from", BAD_WEIGHTS_FROM, ids=ascii)
def test_a_revision_cannot_borrow_weights_but_a_base_models(arena: Arena, weights_from: str) -> None:
    their = arena.tmp / "their"
    their.mkdir()
    (their / "model.bin").write_bytes(SECRET)
    publish_folder(
        arena.store, THEIR_REVISION, their, ManifestModel(kind="model-revision", engine_id="their-engine")
    )
    hand_made_manifest(arena.store, "models/mine/1", files=[], weights_from=weights_from)
    with pytest.raises(ManifestError, match="not a valid manifest"):
        fetch_folder(arena.store, "models/mine/1", arena.tmp / "cache")
    assert cached_files(arena.tmp / "cache") == []
    arena.assert_contained()


def test_the_node_refuses_hand_made_manifests_and_locations(arena: Arena) -> None:
    """The node's model manager fed a manifest whose entries leave the revision's folder, and
    locations that leave the store: every load FAILED, nothing cached, nothing outside touched."""
    locations = []
    for i, entry in enumerate(("../../outside/secret", "/etc/passwd", "a/../../../x", "..\\x")):
        location = f"models/e1/{i + 1}"
        hand_made_manifest(
            arena.store, location, files=[{"path": entry, "sha256": "0" * 64, "size": len(SECRET)}]
        )
        locations.append(location)
    hand_made_manifest(arena.store, "models/e1/9", files=[], weights_from=f"../{THEIR_REVISION}")
    locations += ["models/e1/9", "../outside", "models/../../outside", "/etc", "models/e1/1/"]
    before = arena.state()
    statuses: list[node_pb2.ModelStatus] = []

    async def load_each() -> list[BaseException]:
        manager = ModelManager(arena.settings, arena.store)
        manager.listeners.append(statuses.append)
        failures = []
        try:
            for revision, location in enumerate(locations, start=1):
                ref = node_pb2.ModelRef(engine_id="e1", revision=revision, location=location)
                with pytest.raises(StoreError) as failed:
                    await manager.get(ref)
                failures.append(failed.value)
        finally:
            await manager.close()
        return failures

    failures = asyncio.run(load_each())
    assert [type(f).__name__ for f in failures] == ["ManifestError"] * 5 + ["InvalidKey"] * 4
    final = [s for s in statuses if s.state != node_pb2.MODEL_STATE_LOADING]
    assert [s.state for s in final] == [node_pb2.MODEL_STATE_FAILED] * len(locations)
    assert all(str(arena.tmp) not in s.message for s in final)
    assert cached_files(arena.settings.node_cache_dir) == []
    arena.assert_contained()
    assert arena.state() == before


@pytest.mark.parametrize(
    "fields",
    [
        {"files": [{"path": "../../outside/secret", "sha256": "0" * 64, "size": len(SECRET)}]},
        {"files": [{"path": "/etc/passwd", "sha256": "0" * 64, "size": 1}]},
        {"files": [], "weights_from": f"../{THEIR_REVISION}"},
        {"files": [], "weights_from": THEIR_REVISION},
    ],
    ids=["relative", "absolute", "weights-traversal", "weights-other-engine"],
)
def test_the_download_archiver_refuses_hand_made_manifests(arena: Arena, fields: dict[str, Any]) -> None:
    hand_made_manifest(arena.store, "models/e1/1", **fields)
    before = arena.state()
    with pytest.raises(NotFound, match="not available") as refused:
        open_archive(arena.settings, DownloadGrant(engine_id="e1", revision=1))
    assert str(arena.tmp) not in refused.value.message
    arena.assert_contained()
    assert arena.state() == before


def test_a_base_model_name_cannot_lead_out_of_base_models(arena: Arena) -> None:
    hand_made_manifest(arena.store, THEIR_REVISION)
    before = arena.state()
    for name in (*TRAVERSALS, f"../{THEIR_REVISION}", "../models/their-engine/1", "a..b", "x" * 101):
        with pytest.raises(InvalidName):
            publish_inference_only(
                arena.store,
                engine_id="mine",
                revision=1,
                build_id="b1",
                base_model=name,
                source_language="eng_Latn",
                target_language="swh_Latn",
            )
    assert arena.state() == before
    arena.assert_contained()


BAD_BASE_MODEL_NAMES = (*TRAVERSALS, "../models/their-engine/1", "a..b", "x" * 101, "-a", "_a", "a/b")


@pytest.mark.parametrize("name", BAD_BASE_MODEL_NAMES, ids=ascii)
def test_build_options_refuse_a_base_model_name_that_is_not_one(name: str) -> None:
    with pytest.raises(BuildOptionsError, match="baseModel"):
        NmtBuildOptions.parse(json.dumps({"baseModel": name}))
    with pytest.raises(InvalidName):
        base_model_folder(name)


@pytest.mark.parametrize("name", ["tiny-nllb", "nllb-200-distilled-600M", "a.b_c-1", "x" * 100])
def test_build_options_accept_base_model_names(name: str) -> None:
    assert NmtBuildOptions.parse(json.dumps({"baseModel": name})).base_model == name
    assert base_model_folder(name) == f"base-models/{name}"


@pytest.mark.parametrize("value", (*TRAVERSALS, "a/b", "", "x" * 65), ids=ascii)
def test_a_build_job_refuses_engine_and_build_ids_that_are_not_ids(value: str) -> None:
    with pytest.raises(InvalidName):
        check_id("build", value)
    with pytest.raises(InvalidName):
        ModelRevision(value, 1).checked_location()


def test_published_files_are_verified_names(arena: Arena) -> None:
    """The publisher's own manifests pass the entry check (hf/ subfolder included)."""
    folder = arena.tmp / "model"
    (folder / "hf").mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"m")
    (folder / "hf" / "config.json").write_text("{}")
    published = publish_folder(
        arena.store, "base-models/x", folder, ManifestModel(kind="base-model", name="x")
    )
    assert read_manifest(arena.store, "base-models/x") == published
    _, local = fetch_folder(arena.store, "base-models/x", arena.tmp / "cache")
    assert sha256_file(local / "hf" / "config.json") == sha256_file(folder / "hf" / "config.json")
    assert os.path.commonpath([local, arena.tmp / "cache"]) == str(arena.tmp / "cache")
    arena.assert_contained()


def test_the_watches_see_an_escape(arena: Arena) -> None:
    """The containment checks above can fail: a read of the sentinel, and an S3 request beside the
    prefix, are both seen."""
    assert (arena.outside / "secret").read_bytes() == SECRET
    assert arena.files.touched(arena.outside) != []
    if arena.kind == "s3":
        client = boto3.client("s3", endpoint_url=arena.endpoint)
        client.get_object(Bucket=arena.bucket, Key="other/secret")
        client.list_objects_v2(Bucket=arena.bucket, Prefix="servalx/")
        assert [op for op, _ in arena.s3.outside(arena.bucket, PREFIX)] == ["GetObject", "ListObjectsV2"]
