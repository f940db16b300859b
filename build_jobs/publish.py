"""Publishing model revisions and base models to the model store (files first, manifest last).

A model revision is immutable: `publish_revision` refuses a folder that holds anything, and when
it fails or is stopped before its manifest is written it removes what it uploaded."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from serval_common.build_options import TrainingDefaults
from serval_common.languages import inference_only_refusal
from serval_common.manifest import (
    MANIFEST,
    TRAINING_CHECKPOINT,
    Manifest,
    ManifestError,
    ManifestFile,
    base_model_folder,
    describe_files,
    read_manifest,
    remove_revision,
)
from serval_common.model_revision import ModelRevision
from serval_common.store import ModelStore

__all__ = [
    "HF_SUBFOLDER",
    "RevisionExists",
    "base_model_prefix",
    "checkpoint_max_positions",
    "inference_only_manifest",
    "publish_base_model",
    "publish_inference_only",
    "publish_model_folder",
    "publish_revision",
    "set_training_defaults",
]

log = logging.getLogger(__name__)

Check = Callable[[], None]
"""Called before every upload and before the manifest; raises (e.g. `Canceled`) to stop."""


class RevisionExists(ManifestError):
    """The revision's folder already holds objects: a model revision is never written twice."""


def base_model_prefix(name: str) -> str:
    return base_model_folder(name)


def inference_only_manifest(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    base_model: str,
    source_language: str,
    target_language: str,
) -> Manifest:
    """The manifest of a revision that serves `base_model`'s weights without copying them."""
    base = read_manifest(store, base_model_prefix(base_model))
    refusal = inference_only_refusal(base_model, base.languages, source_language, target_language)
    if refusal is not None:
        raise ManifestError(refusal)
    return Manifest(
        kind="model-revision",
        engine_id=engine_id,
        revision=revision,
        build_id=build_id,
        base_model=base_model,
        weights_from=base_model_prefix(base_model),
        source_language=source_language,
        target_language=target_language,
        languages=base.languages,
        ctranslate2_version=base.ctranslate2_version,
        quantization=base.quantization,
        max_positions=base.max_positions,
        scores=base.scores,
    )


def publish_inference_only(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    base_model: str,
    source_language: str,
    target_language: str,
) -> Manifest:
    """Publish `base_model` as the engine's revision without copying its weights."""
    manifest = inference_only_manifest(
        store,
        engine_id=engine_id,
        revision=revision,
        build_id=build_id,
        base_model=base_model,
        source_language=source_language,
        target_language=target_language,
    )
    return publish_revision(store, manifest, None, None)


def publish_revision(
    store: ModelStore,
    manifest: Manifest,
    folder: Path | None,
    hf_dir: Path | None = None,
    *,
    check: Check | None = None,
) -> Manifest:
    """Publish `models/{engineId}/{revision}/` from `manifest` and a local model folder of any
    family (CTranslate2 weights, with `hf_dir` their training checkpoint; a Thot model folder…),
    or none: an inference-only revision. Raises `RevisionExists`, writing nothing, when the folder holds
    any object. Whatever stops the upload before the manifest is written (a store failure, or
    `check` raising) removes the files uploaded so far before it propagates."""
    if manifest.engine_id is None or manifest.revision is None or manifest.build_id is None:
        raise ManifestError("a model revision's manifest names its engine, revision and build")
    prefix = ModelRevision(manifest.engine_id, manifest.revision).checked_location()
    existing = store.list_keys(prefix)
    if existing:
        raise RevisionExists(
            f"{prefix} already holds {len(existing)} object(s): a model revision is never "
            "overwritten, so this build publishes nothing; start the build again"
        )
    try:
        return publish_model_folder(store, prefix, folder, hf_dir, manifest, check=check)
    except BaseException:
        _remove_partial(store, manifest.engine_id, manifest.revision, manifest.build_id)
        raise


def _remove_partial(store: ModelStore, engine_id: str, revision: int, build_id: str) -> None:
    extra = {"engine_id": engine_id, "build_id": build_id, "revision": revision}
    try:
        removed = remove_revision(store, engine_id, revision, build_id=build_id)
    except Exception:
        log.exception("could not remove a partly published revision; the API service removes it", extra=extra)
        return
    if removed:
        log.info("partly published revision removed", extra={**extra, "objects": removed})


HF_SUBFOLDER = TRAINING_CHECKPOINT
"""A published model folder keeps its Hugging Face checkpoint under `hf/` so it can be fine-tuned;
the node loads CTranslate2 from the folder root and ignores it."""


TRAINING_DEFAULTS_FILE = "serval-training-defaults.json"
"""A checkpoint folder's own training defaults (`TrainingDefaults` as JSON), which
`publish_base_model` writes into the base model's manifest when it is given none: the tiny demo
model's folder carries its fast learning rate this way (`build_jobs.base_model.tiny`)."""


def checkpoint_training_defaults(hf_dir: Path | None) -> TrainingDefaults | None:
    """The training defaults a checkpoint folder carries in `TRAINING_DEFAULTS_FILE`, if any."""
    path = None if hf_dir is None else hf_dir / TRAINING_DEFAULTS_FILE
    if path is None or not path.is_file():
        return None
    return TrainingDefaults.model_validate_json(path.read_text(encoding="utf-8"))


def publish_base_model(
    store: ModelStore,
    name: str,
    ct2_dir: Path,
    *,
    languages: list[str],
    quantization: str | None,
    hf_dir: Path | None = None,
    training_defaults: TrainingDefaults | None = None,
) -> Manifest:
    """Publish the CTranslate2 model and, with `hf_dir`, its Hugging Face checkpoint under `hf/`.
    `training_defaults` (`TrainingDefaults.checked(learning_rate=…)`): the hyperparameters its
    fine-tunes take where neither the build nor the deployment sets them; None: those the
    checkpoint folder carries (`TRAINING_DEFAULTS_FILE`), else none (the code's defaults)."""
    import ctranslate2

    manifest = Manifest(
        kind="base-model",
        name=name,
        languages=languages,
        ctranslate2_version=ctranslate2.__version__,
        quantization=quantization,
        training_defaults=checkpoint_training_defaults(hf_dir)
        if training_defaults is None
        else training_defaults,
    )
    return publish_model_folder(store, base_model_prefix(name), ct2_dir, hf_dir, manifest)


def set_training_defaults(
    store: ModelStore, name: str, training_defaults: TrainingDefaults | None
) -> Manifest:
    """Rewrite the manifest of the published base model `name` with these training defaults (None:
    none); its files, and so the weights nodes serve, stay as they are. Builds that start after it
    take them."""
    prefix = base_model_prefix(name)
    manifest = read_manifest(store, prefix)
    if manifest.kind != "base-model":
        raise ManifestError(f"{prefix} holds no base model")
    updated = manifest.model_copy(update={"training_defaults": training_defaults})
    store.write_bytes(f"{prefix}/{MANIFEST}", updated.model_dump_json(indent=2).encode())
    return updated


def publish_model_folder(
    store: ModelStore,
    prefix: str,
    folder: Path | None,
    hf_dir: Path | None,
    manifest: Manifest,
    *,
    check: Check | None = None,
) -> Manifest:
    """Upload `folder`'s files and, with `hf_dir`, its files under `hf/` (in place of any
    `folder/hf/`), then the manifest, last. With neither folder the manifest alone is written."""
    uploads: list[tuple[ManifestFile, Path]] = []
    if folder is not None:
        uploads += [
            (f, folder / f.path)
            for f in describe_files(folder)
            if hf_dir is None or not f.path.startswith(f"{HF_SUBFOLDER}/")
        ]
    if hf_dir is not None:
        uploads += [
            (ManifestFile(path=f"{HF_SUBFOLDER}/{f.path}", sha256=f.sha256, size=f.size), hf_dir / f.path)
            for f in describe_files(hf_dir)
        ]
        manifest = manifest.model_copy(update={"max_positions": checkpoint_max_positions(hf_dir)})
    if folder is not None or hf_dir is not None:
        manifest = manifest.model_copy(update={"files": [entry for entry, _ in uploads]})
    for entry, source in uploads:
        if check is not None:
            check()
        store.upload_file(f"{prefix}/{entry.path}", source)
    if check is not None:
        check()
    store.write_bytes(f"{prefix}/{MANIFEST}", manifest.model_dump_json(indent=2).encode())
    return manifest


def checkpoint_max_positions(hf_dir: Path) -> int | None:
    """The Hugging Face checkpoint's position limit."""
    config = json.loads((hf_dir / "config.json").read_text())
    value = config.get("max_position_embeddings")
    return int(value) if value else None
