"""Base models: a tiny NLLB-architecture model trained here, or an imported NLLB-200 checkpoint,
converted to CTranslate2. torch, transformers and ctranslate2 are imported only when called."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from build_jobs.base_model.checkpoint import CheckpointRefused, check_checkpoint, check_converted_vocabulary
from build_jobs.base_model.convert import convert_to_ctranslate2
from build_jobs.base_model.tiny import Progress, make_tiny_model

__all__ = [
    "CheckpointRefused",
    "ImportedCheckpoint",
    "convert_to_ctranslate2",
    "import_checkpoint",
    "import_hf_checkpoint",
    "make_tiny_base_model",
    "make_tiny_model",
]


def make_tiny_base_model(
    work_dir: Path,
    source_lines: Sequence[str],
    target_lines: Sequence[str],
    source_code: str,
    target_code: str,
    *,
    steps: int = 1000,
    quantization: str | None = "int8",
    progress: Progress | None = None,
) -> Path:
    """Train a tiny model into `work_dir/hf` and convert it into `work_dir/ct2`, which it returns."""
    hf_dir = make_tiny_model(
        work_dir / "hf", source_lines, target_lines, source_code, target_code, steps=steps, progress=progress
    )
    return convert_to_ctranslate2(hf_dir, work_dir / "ct2", quantization=quantization)


@dataclass(frozen=True)
class ImportedCheckpoint:
    ct2_dir: Path
    """The CTranslate2 model a node loads."""
    hf_dir: Path
    """The checked checkpoint to publish under `hf/` (what fine-tunes start from)."""
    languages: list[str]
    """The language codes its tokenizer knows: what the base model's manifest lists."""
    derived_sentencepiece: bool


def import_checkpoint(
    hf_dir: Path, work_dir: Path, *, quantization: str | None = "int8"
) -> ImportedCheckpoint:
    """Check a Hugging Face NLLB-200 checkpoint folder (`check_checkpoint`), stage it into
    `work_dir/hf` and convert it into `work_dir/ct2`. Raises `CheckpointRefused` before anything is
    converted when the folder would fail a build or a node."""
    checked = check_checkpoint(hf_dir, work_dir / "hf")
    try:
        ct2_dir = convert_to_ctranslate2(checked.hf_dir, work_dir / "ct2", quantization=quantization)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        text = str(exc).strip().splitlines()
        raise CheckpointRefused(
            f"CTranslate2 could not convert {hf_dir} ({(text[0] if text else type(exc).__name__)[:200]}); "
            "check that the weights match config.json."
        ) from None
    check_converted_vocabulary(ct2_dir, checked.hf_dir, checked.languages)
    return ImportedCheckpoint(ct2_dir, checked.hf_dir, checked.languages, checked.derived_sentencepiece)


def import_hf_checkpoint(hf_dir: Path, work_dir: Path, *, quantization: str | None = "int8") -> Path:
    """`import_checkpoint`'s CTranslate2 folder, `work_dir/ct2`."""
    return import_checkpoint(hf_dir, work_dir, quantization=quantization).ct2_dir
