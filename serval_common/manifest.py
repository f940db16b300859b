"""`manifest.json`: what makes a model folder in the model store visible and verifiable.

A publisher uploads every file first and the manifest last; a reader trusts only folders with a
manifest and checks every file against its sha256 and size before using it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from serval_common import families
from serval_common.build_options import TrainingDefaults, TrainingHyperparameters
from serval_common.languages import NLLB_LANGUAGE_CODES
from serval_common.model_revision import BASE_MODELS, TRAINING_CHECKPOINT, ModelRevision, weights_identity
from serval_common.names import base_model_name_problem, check_base_model_name
from serval_common.store import ModelStore, ObjectMissing, StoreError, StoreUnavailable, error_chain
from serval_common.store.base import check_key, relative_path_problem

MANIFEST = "manifest.json"

InputFormat = Literal["plain", "fuzzy-match"]
"""What a revision's model reads (`Manifest.input_format`)."""


MAX_FILE_PATH_BYTES = 512


class ManifestFile(BaseModel):
    path: str = Field(description="relative POSIX path of the file in the model folder")
    sha256: str
    size: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _clean_relative_path(cls, value: str) -> str:
        """Every reader joins `path` to a store prefix and to a local folder: a path that is not
        a clean relative one (`..`, absolute, backslashes, control characters…) is refused here,
        before anything joins it."""
        problem = relative_path_problem(value, MAX_FILE_PATH_BYTES)
        if problem is None and value == MANIFEST:
            problem = "it is the manifest itself"
        if problem is not None:
            raise ValueError(f"file path {value[:60]!a} is not a clean relative path: {problem}")
        return value


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
    languages: list[str] = Field(
        default_factory=list,
        description="The NLLB (FLORES-200) codes the model knows and serves: a base model's are the codes "
        "its tokenizer maps to ids of their own (a tiny demo model's, the pair it was trained on); a "
        "base model manifest written before this field existed knows all 202 NLLB-200 languages.",
    )
    added_language_codes: list[str] = Field(default_factory=list)
    ctranslate2_version: str | None = None
    quantization: str | None = None
    max_positions: int | None = Field(
        default=None, description="the model's position limit: longest input and output in tokens"
    )
    files: list[ManifestFile] = Field(default_factory=list)
    input_format: InputFormat = Field(
        default="plain",
        description="What the model reads: `plain` sources, or (`fuzzy-match`) each source with the target "
        "of its best match in the revision's translation memory (serval_common.fuzzy_memory), which the "
        "revision publishes as memory.jsonl and which grows with every pair trained on the engine.",
    )
    scores: dict[str, float] = Field(default_factory=dict)
    training: dict[str, float] = Field(
        default_factory=dict, description="steps, seconds, steps_per_second, stopped_by_budget (0/1)"
    )
    training_defaults: TrainingDefaults | None = Field(
        default=None,
        description="A base model's training hyperparameters for the fine-tunes that start from it, "
        "where neither the build's options nor the deployment's settings give them.",
    )
    hyperparameters: TrainingHyperparameters | None = Field(
        default=None,
        description="A fine-tuned revision's training hyperparameters and where each came from.",
    )
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @model_validator(mode="before")
    @classmethod
    def _old_base_model_languages(cls, data: object) -> object:
        """Base models were all full NLLB-200 checkpoints before their manifests listed languages."""
        if isinstance(data, dict) and data.get("kind") == "base-model" and "languages" not in data:
            return {**data, "languages": list(NLLB_LANGUAGE_CODES)}
        return data

    @field_validator("weights_from")
    @classmethod
    def _base_model_folder(cls, value: str | None) -> str | None:
        """Only an inference-only build reuses weights, and only a base model's: a manifest can
        never lend out another engine's revision."""
        if value is None:
            return None
        folder, _, name = value.partition("/")
        problem = "it is not base-models/{name}" if folder != BASE_MODELS else base_model_name_problem(name)
        if problem is not None:
            raise ValueError(f"weights_from {value[:60]!a} is not a base model folder: {problem}")
        return value

    @property
    def learns_segments(self) -> bool:
        """Whether train-segment changes what the revision answers, so nodes replay the engine's
        pairs into it and it is never shared with another engine: a family that learns
        (smt-transfer), or a revision that reads fuzzy matches from its memory. The one place
        that says so: the API service records it with the revision (`EngineRow.model_learns`)."""
        return self.input_format != "plain" or families.of_backend(self.backend).learns

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)


def base_model_folder(name: str) -> str:
    """`base-models/{name}`; `InvalidName` for a name that cannot be a base model's."""
    return f"{BASE_MODELS}/{check_base_model_name(name)}"


class ManifestError(StoreError):
    """A manifest is missing or invalid, or a file does not match it."""


class ChecksumMismatch(ManifestError):
    """A downloaded file's size or sha256 differs from what the manifest says.

    Either the object in the model store is corrupt (it stays so) or the download was (fetching
    again may help): callers may fetch once more, never in a loop."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def store_object_missing(exc: BaseException) -> bool:
    """Whether a store failure means the object is not there (as opposed to unreachable)."""
    return any(isinstance(c, (ObjectMissing, FileNotFoundError)) for c in error_chain(exc))


def store_unavailable(exc: BaseException) -> bool:
    """Whether a failure is the model store being unreachable or overloaded for now: worth
    retrying later, unlike a missing object, refused access or a file that fails verification."""
    if isinstance(exc, ChecksumMismatch) or store_object_missing(exc):
        return False
    return any(isinstance(c, (StoreUnavailable, ConnectionError, TimeoutError)) for c in error_chain(exc))


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


class ForeignRevision(ManifestError):
    """A revision folder's manifest names another build: it is not the caller's to remove."""


def remove_revision(store: ModelStore, engine_id: str, revision: int, *, build_id: str) -> int:
    """Remove what build `build_id` wrote under `models/{engineId}/{revision}/` and return how
    many objects there were. The manifest goes first, so no reader ever sees a manifest whose
    files are going; a folder whose manifest names another build raises `ForeignRevision`."""
    prefix = ModelRevision(engine_id, revision).checked_location()
    keys = store.list_keys(prefix)
    if not keys:
        return 0
    manifest_key = f"{prefix}/{MANIFEST}"
    if manifest_key in keys:
        try:
            owner = Manifest.model_validate_json(store.read_bytes(manifest_key)).build_id
        except ValueError:
            owner = None
        if owner is not None and owner != build_id:
            raise ForeignRevision(f"{prefix} was published by build {owner}, not {build_id}")
        store.delete(manifest_key)
    store.delete_prefix(prefix)
    return len(keys)


def read_manifest(store: ModelStore, prefix: str) -> Manifest:
    """`InvalidKey` (not a ManifestError) when `prefix` is not a clean key."""
    check_key(prefix)
    try:
        raw = store.read_bytes(f"{prefix}/{MANIFEST}")
    except StoreError as exc:
        if not store_object_missing(exc):
            raise ManifestError(str(exc)) from exc
        raise ManifestError(
            f"no {MANIFEST} under {prefix}: the model is missing or not yet published"
        ) from exc
    try:
        return Manifest.model_validate_json(raw)
    except ValueError as exc:
        raise ManifestError(f"{prefix}/{MANIFEST} is not a valid manifest: {exc}") from exc


@dataclass(frozen=True)
class ResolvedRevision:
    """A published folder's manifest, and where the files a node loads for it are."""

    prefix: str
    manifest: Manifest
    files_prefix: str
    """`weights_from` when the folder reuses a base model's weights, else `prefix`."""
    files_manifest: Manifest

    @property
    def weights(self) -> str:
        """The weights identity (`serval_common.model_revision`): what a node holds once."""
        return weights_identity(
            self.prefix,
            learns_segments=self.manifest.learns_segments,
            backend=self.manifest.backend,
            max_positions=self.files_manifest.max_positions,
            files=self.files_manifest.files,
        )

    def serving_files(self) -> list[ManifestFile]:
        """The files serving reads: all but the `hf/` training checkpoint."""
        return [f for f in self.files_manifest.files if not f.path.startswith(f"{TRAINING_CHECKPOINT}/")]


def resolve_revision(store: ModelStore, prefix: str) -> ResolvedRevision:
    """Read the manifest of `prefix` and, for a folder that reuses weights, the manifest of the
    folder holding them: two small reads, no model file."""
    manifest = read_manifest(store, prefix)
    if not manifest.weights_from:
        return ResolvedRevision(prefix, manifest, prefix, manifest)
    return ResolvedRevision(
        prefix, manifest, manifest.weights_from, read_manifest(store, manifest.weights_from)
    )


def fetch_folder(
    store: ModelStore,
    prefix: str,
    cache_dir: Path,
    *,
    with_checkpoint: bool = True,
    resolved: ResolvedRevision | None = None,
) -> tuple[Manifest, Path]:
    """Return the manifest of `prefix` and a verified local copy of its weights.

    Follows `weights_from` to the folder that holds the files. Files download into a temporary
    folder of this call's own, are checked against the manifest, and the folder is renamed into
    place, so a partial or corrupt copy is never visible: a file that fails verification raises
    `ChecksumMismatch` and the temporary folder (the bad file with it) is removed, so fetching
    again downloads afresh. A copy already in the cache is reused when every file is there at its
    manifest size (sha256 was verified when it was written); otherwise it is fetched again.
    `with_checkpoint=False` leaves out the `hf/` training checkpoint (what serving needs).
    `resolved`: the manifests, when the caller read them already (`resolve_revision`).
    """
    if resolved is None:
        resolved = resolve_revision(store, prefix)
    manifest, source_prefix, files_manifest = (
        resolved.manifest,
        resolved.files_prefix,
        resolved.files_manifest,
    )
    if not with_checkpoint:
        files_manifest = files_manifest.model_copy(update={"files": resolved.serving_files()})
    files = files_manifest.files
    if not files:
        raise ManifestError(f"{source_prefix}/{MANIFEST} lists no files")
    digest = hashlib.sha256(files_manifest.model_dump_json(include={"files"}).encode()).hexdigest()[:16]
    target = cache_dir / source_prefix / digest
    if target.is_dir():
        if _complete(target, files):
            return manifest, target
        shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _partials_lock:
        _remove_stale_partials(target.parent, digest)
        partial = target.parent / f".partial-{digest}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        partial.mkdir()
        _active_partials.add(partial)
    try:
        for entry in files:
            key = f"{source_prefix}/{entry.path}"
            local = partial / entry.path
            local.parent.mkdir(parents=True, exist_ok=True)
            store.download_file(key, local)
            size = local.stat().st_size
            actual = sha256_file(local)
            if size != entry.size or actual != entry.sha256:
                raise ChecksumMismatch(
                    f"{key} does not match its manifest: checksum verification failed (expected "
                    f"{entry.size} bytes sha256 {entry.sha256[:12]}…, got {size} bytes sha256 {actual[:12]}…)",
                    key,
                )
        if not _complete(partial, files):
            raise ManifestError(f"the download of {source_prefix} lost files before it was complete")
        try:
            os.rename(partial, target)
        except OSError:
            if not (target.is_dir() and _complete(target, files)):
                raise
    finally:
        with _partials_lock:
            _active_partials.discard(partial)
        shutil.rmtree(partial, ignore_errors=True)
    return manifest, target


_active_partials: set[Path] = set()
"""Temporary download folders in use by this process (one per `fetch_folder` call)."""
_partials_lock = threading.Lock()


def _complete(folder: Path, files: list[ManifestFile]) -> bool:
    """Every manifest file is in `folder` with its manifest size: a cheap check, not a checksum."""
    for entry in files:
        try:
            if (folder / entry.path).stat().st_size != entry.size:
                return False
        except OSError:
            return False
    return True


def _remove_stale_partials(parent: Path, digest: str) -> None:
    """Remove temporary download folders an earlier run of this process id left behind (a
    restarted container usually gets the same id); other processes' folders are theirs.
    The caller holds `_partials_lock`."""
    pid = os.getpid()
    for stale in [*parent.glob(f".partial-{digest}-{pid}-*"), parent / f".partial-{digest}-{pid}"]:
        if stale not in _active_partials and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
