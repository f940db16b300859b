"""Publishing model revisions to the model store (files first, manifest last)."""

from __future__ import annotations

import json
from pathlib import Path

from serval_common.manifest import (
    MANIFEST,
    TRAINING_CHECKPOINT,
    Manifest,
    ManifestError,
    ManifestFile,
    base_model_folder,
    describe_files,
    publish_folder,
    read_manifest,
)
from serval_common.names import check_id
from serval_common.store import ModelStore


def base_model_prefix(name: str) -> str:
    return base_model_folder(name)


def revision_prefix(engine_id: str, revision: int) -> str:
    return f"models/{check_id('engine', engine_id)}/{revision}"


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
    base = read_manifest(store, base_model_prefix(base_model))
    unknown = [code for code in (source_language, target_language) if code not in base.languages]
    if unknown:
        raise ManifestError(
            f"base model {base_model!r} does not know {', '.join(unknown)}; "
            "an inference-only build can only serve languages the base model knows"
        )
    manifest = Manifest(
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
    return publish_folder(store, revision_prefix(engine_id, revision), None, manifest)


HF_SUBFOLDER = TRAINING_CHECKPOINT
"""A published model folder keeps its Hugging Face checkpoint under `hf/` so it can be fine-tuned;
the node loads CTranslate2 from the folder root and ignores it."""


def publish_base_model(
    store: ModelStore,
    name: str,
    ct2_dir: Path,
    *,
    languages: list[str],
    quantization: str | None,
    hf_dir: Path | None = None,
) -> Manifest:
    """Publish the CTranslate2 model and, with `hf_dir`, its Hugging Face checkpoint under `hf/`."""
    import ctranslate2

    manifest = Manifest(
        kind="base-model",
        name=name,
        languages=languages,
        ctranslate2_version=ctranslate2.__version__,
        quantization=quantization,
    )
    return publish_model_folder(store, base_model_prefix(name), ct2_dir, hf_dir, manifest)


def publish_model_folder(
    store: ModelStore, prefix: str, ct2_dir: Path, hf_dir: Path | None, manifest: Manifest
) -> Manifest:
    """Like `publish_folder`, with `hf_dir`'s files added under `hf/`; the manifest goes last."""
    if hf_dir is None:
        return publish_folder(store, prefix, ct2_dir, manifest)
    root = [f for f in describe_files(ct2_dir) if not f.path.startswith(f"{HF_SUBFOLDER}/")]
    hf = describe_files(hf_dir)
    files = [
        *root,
        *(ManifestFile(path=f"{HF_SUBFOLDER}/{f.path}", sha256=f.sha256, size=f.size) for f in hf),
    ]
    for entry in root:
        store.upload_file(f"{prefix}/{entry.path}", ct2_dir / entry.path)
    for entry in hf:
        store.upload_file(f"{prefix}/{HF_SUBFOLDER}/{entry.path}", hf_dir / entry.path)
    manifest = manifest.model_copy(update={"files": files, "max_positions": _max_positions(hf_dir)})
    store.write_bytes(f"{prefix}/{MANIFEST}", manifest.model_dump_json(indent=2).encode())
    return manifest


def _max_positions(hf_dir: Path) -> int | None:
    config = json.loads((hf_dir / "config.json").read_text())
    value = config.get("max_position_embeddings")
    return int(value) if value else None
