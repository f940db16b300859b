"""A base model with the exact shape of nllb-200-distilled-600M and random weights, for benchmarks
that must pay what the real model costs without downloading it.

The architecture is the real one (615M parameters: 12+12 layers of width 1024, 16 heads, FFN 4096,
a 256,206-row embedding tied to the output projection), converted to CTranslate2 int8 like an
imported NLLB-200 checkpoint, and published together with its Hugging Face checkpoint under `hf/`
so a transformers baseline loads the same weights. Its SentencePiece model is trained on the bundled
English and Swahili verses (about 16k pieces); the embedding rows past the tokenizer's length exist
only for the shape and are never produced.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from build_jobs.base_model import import_checkpoint
from build_jobs.base_model.convert import without_progress_bars
from build_jobs.base_model.tiny import EOS_ID, nllb_config
from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL, make_nllb_tokenizer, save_nllb_tokenizer
from build_jobs.publish import HF_SUBFOLDER, base_model_prefix, publish_base_model
from serval_common.manifest import MANIFEST
from serval_common.store import ModelStore

if TYPE_CHECKING:
    from transformers import M2M100Config, M2M100ForConditionalGeneration

NLLB_600M_SHAPE = "nllb-600m-shape"
"""The base model's name in the store."""

VOCAB_SIZE = 256_206
PARAMETERS = 615_073_792
"""What `num_parameters()` counts for `nllb_600m_config()` (the tied embedding once)."""
TOKENIZER_VOCAB_SIZE = 16_000
"""An upper bound: the verses yield somewhat fewer pieces."""
SEED = 0
CT2_VOCABULARY = "shared_vocabulary.json"

console = Console(stderr=True)


def nllb_600m_config() -> M2M100Config:
    """The hyper-parameters of facebook/nllb-200-distilled-600M's config.json."""
    return nllb_config(VOCAB_SIZE, d_model=1024, layers=12, heads=16, ffn=4096, max_positions=1024)


def ensure_nllb_600m_shape(store: ModelStore, name: str = NLLB_600M_SHAPE, *, rebuild: bool = False) -> None:
    """Publish, unless the store already has base-models/<name>/manifest.json (and not `rebuild`), a
    randomly initialised model with the exact nllb-200-distilled-600M architecture, converted to
    CTranslate2 int8, together with its Hugging Face checkpoint (so a transformers baseline can load
    the same weights).

    The weights are drawn with `torch.manual_seed(0)`, then the tied embedding rows of `</s>` and of
    every id the tokenizer does not use are set to zero. Random weights would otherwise stop at a
    random length. With a zero row a token's logit is 0 while the real pieces' logits are spread
    around 0, so beam search never picks `</s>` or an unused id: every translation runs to the
    decoding limit (a fixed output length, so random weights cost what real ones do) and its output
    is real pieces that detokenize like real text.

    The build takes a few minutes on 2 cores and about 2.5 GB of temporary disk; a rebuild replaces
    the published folder only once the new model is converted.
    """
    prefix = base_model_prefix(name)
    if store.exists(f"{prefix}/{MANIFEST}") and not rebuild:
        console.print(f"reusing base model [bold]{name}[/] in {store.url}")
        return
    console.print(f"building base model [bold]{name}[/] (nllb-200-distilled-600M shape, random weights)")
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        work = Path(tmp)
        hf_dir = work / HF_SUBFOLDER
        _write_checkpoint(hf_dir)
        with _phase("converting to CTranslate2 int8"):
            # The administrator's import path, with every check it makes (`serval admin base-model import`).
            imported = import_checkpoint(hf_dir, work, quantization="int8")
        _check_vocabulary(imported.ct2_dir)
        with _phase(f"publishing to {store.url}"):
            store.delete_prefix(prefix)
            publish_base_model(
                store,
                name,
                imported.ct2_dir,
                languages=imported.languages,
                quantization="int8",
                hf_dir=imported.hf_dir,
            )
    console.print(f"stored base model [bold]{name}[/] in {store.url}")


def _write_checkpoint(hf_dir: Path) -> None:
    """The files `make_tiny_model` writes: model (safetensors), config, tokenizer files and the
    SentencePiece model."""
    import torch
    from transformers import M2M100ForConditionalGeneration

    from serval_cli.corpus import demo_pairs

    with _phase("training the tokenizer"):
        pairs = demo_pairs()
        lines = [p.source for p in pairs] + [p.target for p in pairs]
        tokenizer = make_nllb_tokenizer(lines, hf_dir, vocab_size=TOKENIZER_VOCAB_SIZE)
        save_nllb_tokenizer(tokenizer, hf_dir / SENTENCEPIECE_MODEL, hf_dir)
    console.print(f"  tokenizer: {len(tokenizer)} tokens of {VOCAB_SIZE} embedding rows")
    with _phase("initialising 615M random weights"):
        torch.manual_seed(SEED)
        model = M2M100ForConditionalGeneration(nllb_600m_config())
        _silence_unused_rows(model, used=len(tokenizer))
    parameters = model.num_parameters()
    console.print(f"  {parameters:,} parameters")
    if abs(parameters - PARAMETERS) > PARAMETERS // 100:
        raise RuntimeError(f"the model has {parameters:,} parameters, not about {PARAMETERS:,}")
    with _phase("saving the Hugging Face checkpoint"), without_progress_bars():
        model.save_pretrained(str(hf_dir))
    del model
    gc.collect()


def _silence_unused_rows(model: M2M100ForConditionalGeneration, *, used: int) -> None:
    import torch

    embedding = model.model.shared.weight
    if model.lm_head.weight.data_ptr() != embedding.data_ptr():
        raise RuntimeError("the output projection is not tied to the embedding")
    with torch.no_grad():
        embedding[EOS_ID] = 0
        embedding[used:] = 0


def _check_vocabulary(ct2_dir: Path) -> None:
    import json

    vocabulary = json.loads((ct2_dir / CT2_VOCABULARY).read_text(encoding="utf-8"))
    if len(vocabulary) != VOCAB_SIZE:
        raise RuntimeError(
            f"the CTranslate2 vocabulary has {len(vocabulary)} tokens, not the model's {VOCAB_SIZE}"
        )


@contextmanager
def _phase(description: str) -> Iterator[None]:
    started = time.monotonic()
    with console.status(description):
        yield
    console.print(f"{description}: {time.monotonic() - started:.1f} s")
