"""Conversion of a Hugging Face NLLB-architecture folder into a CTranslate2 model folder."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def convert_to_ctranslate2(hf_dir: Path, out_dir: Path, *, quantization: str | None = "int8") -> Path:
    """Write the CTranslate2 model into `out_dir` (which must be absent or empty), with the
    SentencePiece model and the tokenizer files beside it; returns `out_dir`."""
    from ctranslate2.converters import TransformersConverter

    if not (hf_dir / SENTENCEPIECE_MODEL).is_file():
        raise ValueError(f"{hf_dir} has no {SENTENCEPIECE_MODEL}")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} already exists and is not empty")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    copy_files = [SENTENCEPIECE_MODEL, *(name for name in TOKENIZER_FILES if (hf_dir / name).is_file())]

    class AligningConverter(TransformersConverter):
        def _load(self) -> Any:
            spec = super()._load()
            choose_alignment_heads(spec.decoder)
            return spec

    converter = AligningConverter(str(hf_dir), copy_files=copy_files)
    with without_progress_bars():
        # `force` only lets the converter reuse an empty folder: it deletes the folder first.
        converter.convert(str(out_dir), quantization=quantization, force=out_dir.exists())
    return out_dir


def choose_alignment_heads(decoder: Any) -> None:
    """Word alignment comes from the cross-attention CTranslate2 returns, by default the first head
    of the last decoder layer. NLLB was not trained to align, and for such models the penultimate
    layer's attention averaged over all heads aligns best (Garg et al., 2019, "Jointly Learning to
    Align and Translate with Transformer Models"); a one-layer decoder keeps its only layer."""
    layers = len(decoder.layer)
    decoder.alignment_layer = np.int16(-2 if layers >= 2 else -1)
    decoder.alignment_heads = np.int16(int(decoder.num_heads))


@contextmanager
def without_progress_bars() -> Iterator[None]:
    """transformers draws tqdm bars when it loads or saves weights, which garble a caller's own
    progress display."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()
