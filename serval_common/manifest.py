"""`manifest.json`: what makes a model folder in the model store visible and verifiable.

A publisher uploads every file first and the manifest last; a reader trusts only folders with a
manifest and checks every file against its sha256 and size before using it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from serval_common.store import ModelStore, StoreError

MANIFEST = "manifest.json"


class ManifestFile(BaseModel):
    path: str
    sha256: str
    size: int


class Manifest(BaseModel):
    format_version: int = 1
    kind: Literal["base-model", "model-revision"]
    backend: str = "ctranslate2"
    name: str | None = Field(default=None, description="base model name")
    engine_id: str | None = None
    revision: int | None = None
    build_id: str | None = None
    base_model: str | None = None
    weights_from: str | None = Field(
        default=None,
        description="Store folder holding the weights when this revision reuses them "
        "(an inference-only build publishes the base model without copying it).",
    )
    source_language: str | None = None
    target_language: str | None = None
    languages: list[str] = Field(default_factory=list, description="NLLB codes the tokenizer knows")
    added_language_codes: list[str] = Field(default_factory=list)
    ctranslate2_version: str | None = None
    quantization: str | None = None
    max_positions: int | None = Field(
        default=None, description="the model's position limit: longest input and output in tokens"
    )
    files: list[ManifestFile] = Field(default_factory=list)
    scores: dict[str, float] = Field(default_factory=dict)
    training: dict[str, float] = Field(
        default_factory=dict, description="steps, seconds, steps_per_second, stopped_by_budget (0/1)"
    )
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)


class ManifestError(StoreError):
    """A manifest is missing or invalid, or a file does not match it."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe_files(folder: Path) -> list[ManifestFile]:
    return [
        ManifestFile(path=p.relative_to(folder).as_posix(), sha256=sha256_file(p), size=p.stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    ]


def publish_folder(store: ModelStore, prefix: str, folder: Path | None, manifest: Manifest) -> Manifest:
    """Upload `folder`'s files under `prefix`, then the manifest (last) that makes them visible."""
    if folder is not None:
        manifest = manifest.model_copy(update={"files": describe_files(folder)})
        for entry in manifest.files:
            store.upload_file(f"{prefix}/{entry.path}", folder / entry.path)
    store.write_bytes(f"{prefix}/{MANIFEST}", manifest.model_dump_json(indent=2).encode())
    return manifest


def read_manifest(store: ModelStore, prefix: str) -> Manifest:
    try:
        raw = store.read_bytes(f"{prefix}/{MANIFEST}")
    except StoreError as exc:
        raise ManifestError(
            f"no {MANIFEST} under {prefix}: the model is missing or not yet published"
        ) from exc
    try:
        return Manifest.model_validate_json(raw)
    except ValueError as exc:
        raise ManifestError(f"{prefix}/{MANIFEST} is not a valid manifest: {exc}") from exc


TRAINING_CHECKPOINT = "hf"
"""The subfolder holding the Hugging Face checkpoint a build fine-tunes; serving never needs it."""


def fetch_folder(
    store: ModelStore, prefix: str, cache_dir: Path, *, with_checkpoint: bool = True
) -> tuple[Manifest, Path]:
    """Return the manifest of `prefix` and a verified local copy of its weights.

    Follows `weights_from` to the folder that holds the files. Files download into a temporary
    folder, are checked against the manifest, and the folder is renamed into place, so a partial
    or corrupt copy is never visible. A verified copy already in the cache is reused.
    `with_checkpoint=False` leaves out the `hf/` training checkpoint (what serving needs).
    """
    manifest = read_manifest(store, prefix)
    source_prefix, files_manifest = prefix, manifest
    if manifest.weights_from:
        source_prefix = manifest.weights_from
        files_manifest = read_manifest(store, source_prefix)
    if not with_checkpoint:
        files_manifest = files_manifest.model_copy(
            update={
                "files": [f for f in files_manifest.files if not f.path.startswith(f"{TRAINING_CHECKPOINT}/")]
            }
        )
    if not files_manifest.files:
        raise ManifestError(f"{source_prefix}/{MANIFEST} lists no files")
    digest = hashlib.sha256(files_manifest.model_dump_json(include={"files"}).encode()).hexdigest()[:16]
    target = cache_dir / source_prefix / digest
    if target.is_dir():
        return manifest, target
    partial = target.with_name(f".partial-{digest}-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        for entry in files_manifest.files:
            local = partial / entry.path
            local.parent.mkdir(parents=True, exist_ok=True)
            store.download_file(f"{source_prefix}/{entry.path}", local)
            size = local.stat().st_size
            if size != entry.size or sha256_file(local) != entry.sha256:
                raise ManifestError(
                    f"{source_prefix}/{entry.path} does not match its manifest "
                    f"(expected {entry.size} bytes sha256 {entry.sha256[:12]}…, got {size} bytes)"
                )
        try:
            os.rename(partial, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return manifest, target
