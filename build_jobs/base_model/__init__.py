"""Base models: a tiny NLLB-architecture model trained here, or an imported NLLB-200 checkpoint,
converted to CTranslate2. torch, transformers and ctranslate2 are imported only when called."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from build_jobs.base_model.convert import convert_to_ctranslate2
from build_jobs.base_model.tiny import Progress, make_tiny_model
from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL

__all__ = ["convert_to_ctranslate2", "import_hf_checkpoint", "make_tiny_base_model", "make_tiny_model"]


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


def import_hf_checkpoint(hf_dir: Path, work_dir: Path, *, quantization: str | None = "int8") -> Path:
    """Convert a Hugging Face NLLB-200 checkpoint folder into `work_dir/ct2`, which it returns."""
    for required in ("config.json", SENTENCEPIECE_MODEL):
        if not (hf_dir / required).is_file():
            raise ValueError(f"{hf_dir} is not an NLLB checkpoint folder: it has no {required}")
    return convert_to_ctranslate2(hf_dir, work_dir / "ct2", quantization=quantization)
