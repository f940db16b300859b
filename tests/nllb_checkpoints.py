"""Small random NLLB-architecture checkpoints saved the ways an administrator gets them: by
transformers 5 (`tokenizer.json` only), by transformers 4's slow tokenizer (`sentencepiece.bpe.model`
with `tokenizer_config.json`), or both; with all 202 language codes or a few; with `<mask>` where
NLLB has it (last) or before the language codes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from build_jobs.base_model.tiny import nllb_config
from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL, train_sentencepiece
from serval_cli.corpus import demo_pairs
from serval_common.languages import NLLB_LANGUAGE_CODES

Saved = Literal["fast", "slow", "both"]
THREE_LANGUAGES = ("eng_Latn", "swh_Latn", "fra_Latn")


def train_pieces(folder: Path) -> Path:
    """A SentencePiece model trained on the demo's English–Swahili verses: its folder."""
    pairs = demo_pairs()
    train_sentencepiece([p.source for p in pairs] + [p.target for p in pairs], folder, vocab_size=300)
    return folder


def make_checkpoint(
    folder: Path,
    pieces_dir: Path,
    *,
    saved: Saved,
    codes: Sequence[str] = NLLB_LANGUAGE_CODES,
    mask_last: bool = True,
    rows: int | None = None,
) -> Path:
    """A checkpoint with random weights (d_model 16, one layer) whose embedding has a row for each
    of the tokenizer's tokens, or `rows` rows: nllb-200's checkpoints (and the bench's 600M shape)
    have 256,206, more than their tokenizer's length."""
    import torch
    from transformers import M2M100ForConditionalGeneration, NllbTokenizer

    folder.mkdir(parents=True)
    if mask_last:
        tokenizer = NllbTokenizer.from_pretrained(
            str(pieces_dir), additional_special_tokens=list(codes), mask_token=None
        )
        tokenizer.add_special_tokens({"mask_token": "<mask>"})
    else:  # transformers 5 puts `<mask>` right after the pieces when it is given with the codes
        tokenizer = NllbTokenizer.from_pretrained(str(pieces_dir), additional_special_tokens=list(codes))
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(
        nllb_config(rows or len(tokenizer), d_model=16, layers=1, heads=2, ffn=32)
    )
    model.save_pretrained(str(folder))
    if saved in ("fast", "both"):
        tokenizer.save_pretrained(str(folder))
    if saved in ("slow", "both"):
        shutil.copyfile(pieces_dir / SENTENCEPIECE_MODEL, folder / SENTENCEPIECE_MODEL)
    if saved == "slow":
        _write_slow_config(folder, tokenizer, codes)
    return folder


def _write_slow_config(folder: Path, tokenizer: object, codes: Sequence[str]) -> None:
    """`tokenizer_config.json` as transformers 4.38+ writes it for the slow `NllbTokenizer`: the
    added tokens with their ids, and the language codes as additional special tokens."""
    from transformers import NllbTokenizer

    assert isinstance(tokenizer, NllbTokenizer)
    added = sorted(tokenizer.get_added_vocab().items(), key=lambda item: item[1])
    config = {
        "tokenizer_class": "NllbTokenizer",
        "added_tokens_decoder": {
            str(token_id): {"content": token, "special": True, "lstrip": False, "rstrip": False}
            for token, token_id in added
        },
        "additional_special_tokens": list(codes),
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "mask_token": "<mask>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "src_lang": "eng_Latn",
        "model_max_length": 1024,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
