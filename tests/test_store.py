"""The model store and manifests, on a local folder and on a real S3-protocol server."""

from __future__ import annotations

from pathlib import Path

import pytest

from serval_common.manifest import (
    ForeignRevision,
    Manifest,
    ManifestError,
    fetch_folder,
    publish_folder,
    read_manifest,
    remove_revision,
)
from serval_common.store import InvalidKey, ModelStore, StoreError, open_store


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ModelStore:
    if request.param == "local":
        return open_store((tmp_path / "store").as_uri())
    bucket = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/serval", endpoint_url=request.getfixturevalue("moto_endpoint"))


def model_folder(root: Path) -> Path:
    folder = root / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.bin").write_bytes(bytes(range(256)) * 4096)
    (folder / "sub" / "vocab.txt").write_text("a\nb\n")
    return folder


def test_publish_then_fetch_verified_copy(store: ModelStore, tmp_path: Path) -> None:
    published = publish_folder(
        store, "base-models/x", model_folder(tmp_path), Manifest(kind="base-model", name="x")
    )
    assert {f.path for f in published.files} == {"model.bin", "sub/vocab.txt"}
    assert store.list_keys("base-models/x")[-1] == "base-models/x/sub/vocab.txt"

    manifest, local = fetch_folder(store, "base-models/x", tmp_path / "cache")
    assert manifest.name == "x"
    assert (local / "model.bin").read_bytes() == (tmp_path / "model" / "model.bin").read_bytes()
    assert fetch_folder(store, "base-models/x", tmp_path / "cache")[1] == local


def test_revision_reusing_base_weights(store: ModelStore, tmp_path: Path) -> None:
    publish_folder(store, "base-models/x", model_folder(tmp_path), Manifest(kind="base-model", name="x"))
    revision = Manifest(kind="model-revision", engine_id="e1", revision=1, weights_from="base-models/x")
    publish_folder(store, "models/e1/1", None, revision)
    manifest, local = fetch_folder(store, "models/e1/1", tmp_path / "cache")
    assert manifest.engine_id == "e1" and manifest.revision == 1
    assert (local / "sub" / "vocab.txt").read_text() == "a\nb\n"


def test_corrupt_file_is_refused_and_named(store: ModelStore, tmp_path: Path) -> None:
    publish_folder(store, "base-models/x", model_folder(tmp_path), Manifest(kind="base-model", name="x"))
    store.write_bytes("base-models/x/sub/vocab.txt", b"tampered\n")
    with pytest.raises(ManifestError, match=r"sub/vocab\.txt does not match"):
        fetch_folder(store, "base-models/x", tmp_path / "cache")
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_missing_manifest_is_refused(store: ModelStore, tmp_path: Path) -> None:
    store.upload_file("models/e1/1/model.bin", model_folder(tmp_path) / "model.bin")
    with pytest.raises(ManifestError, match=r"no manifest\.json under models/e1/1"):
        read_manifest(store, "models/e1/1")


def test_invalid_manifest_is_refused(store: ModelStore) -> None:
    store.write_bytes("models/e1/1/manifest.json", b'{"kind": "nonsense"}')
    with pytest.raises(ManifestError, match="not a valid manifest"):
        read_manifest(store, "models/e1/1")


def test_local_keys_cannot_leave_the_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    with pytest.raises(InvalidKey, match=r"'\.\.' segment"):
        store.write_bytes("../outside", b"x")
    assert not (tmp_path / "outside").exists()


def test_a_symbolic_link_cannot_lead_out_of_the_local_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(b"secret")
    (tmp_path / "store" / "files").mkdir()
    (tmp_path / "store" / "files" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(InvalidKey, match="leaves the store") as refused:
        store.read_bytes("files/link/secret")
    assert str(tmp_path) not in str(refused.value)
    with pytest.raises(InvalidKey, match="leaves the store"):
        store.write_bytes("files/link/new", b"x")
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret"]


def test_unknown_scheme() -> None:
    with pytest.raises(StoreError, match="unsupported model store URL"):
        open_store("ftp://host/models")


def test_serving_copy_leaves_out_the_training_checkpoint(store: ModelStore, tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    (folder / "hf").mkdir()
    (folder / "hf" / "model.safetensors").write_bytes(b"checkpoint" * 100)
    publish_folder(store, "base-models/x", folder, Manifest(kind="base-model", name="x"))
    _, serving = fetch_folder(store, "base-models/x", tmp_path / "cache", with_checkpoint=False)
    _, training = fetch_folder(store, "base-models/x", tmp_path / "cache")
    assert not (serving / "hf").exists() and (serving / "model.bin").is_file()
    assert (training / "hf" / "model.safetensors").is_file() and training != serving


def test_remove_revision_removes_a_builds_folder_and_spares_another_builds(
    store: ModelStore, tmp_path: Path
) -> None:
    folder = model_folder(tmp_path)
    publish_folder(store, "models/e1/1", folder, Manifest(kind="model-revision", build_id="b1"))
    publish_folder(store, "models/e1/10", folder, Manifest(kind="model-revision", build_id="b10"))
    store.upload_file("models/e1/2/model.bin", folder / "model.bin")

    with pytest.raises(ForeignRevision, match="published by build b10"):
        remove_revision(store, "e1", 10, build_id="b1")
    assert len(store.list_keys("models/e1/10")) == 3, "another build's revision stays whole"

    assert remove_revision(store, "e1", 1, build_id="b1") == 3
    assert remove_revision(store, "e1", 2, build_id="b2") == 1, "a partial upload has no manifest"
    assert remove_revision(store, "e1", 3, build_id="b3") == 0
    assert store.list_keys("models/e1") == store.list_keys("models/e1/10")
    store.delete("models/e1/10/nothing-here")
