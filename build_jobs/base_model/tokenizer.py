"""A SentencePiece model and an `NllbTokenizer` in the real NLLB-200 id order, made from a small corpus.

The id order is `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, the pieces, the 202 language codes, `<mask>`.
`NllbTokenizer` puts `<mask>` before the language codes unless it is left out when loading and added
back afterwards.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from serval_common.languages import NLLB_LANGUAGE_CODES

if TYPE_CHECKING:
    from transformers import NllbTokenizer

SENTENCEPIECE_MODEL = "sentencepiece.bpe.model"
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")


def train_sentencepiece(lines: Iterable[str], out_dir: Path, *, vocab_size: int = 1000) -> Path:
    """Train a BPE model with NLLB's special pieces; `vocab_size` is an upper bound, so a corpus too
    small for it yields fewer pieces instead of an error."""
    import sentencepiece

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(SENTENCEPIECE_MODEL).stem
    sentences = (line.strip() for line in lines)
    with open(os.devnull, "w") as quiet:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=(sentence for sentence in sentences if sentence),
            model_prefix=str(out_dir / stem),
            model_type="bpe",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=1.0,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            logstream=quiet,
        )
    (out_dir / f"{stem}.vocab").unlink(missing_ok=True)
    return out_dir / SENTENCEPIECE_MODEL


def load_nllb_tokenizer(model_dir: Path) -> NllbTokenizer:
    """Build the tokenizer from the `sentencepiece.bpe.model` in `model_dir`."""
    from transformers import NllbTokenizer

    tokenizer = NllbTokenizer.from_pretrained(
        str(model_dir), additional_special_tokens=list(NLLB_LANGUAGE_CODES), mask_token=None
    )
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    check_nllb_tokenizer(tokenizer)
    return tokenizer


def check_nllb_tokenizer(tokenizer: NllbTokenizer) -> None:
    vocabulary = tokenizer.get_vocab()
    special_ids = [vocabulary.get(token) for token in SPECIAL_TOKENS]
    if special_ids != [0, 1, 2, 3]:
        raise RuntimeError(f"special tokens {SPECIAL_TOKENS} have ids {special_ids}, not 0..3")
    missing = [code for code in NLLB_LANGUAGE_CODES if code not in vocabulary]
    if missing:
        raise RuntimeError(f"the tokenizer maps {len(missing)} NLLB language codes to <unk>: {missing[:3]}")
    if vocabulary.get("<mask>") != len(tokenizer) - 1:
        raise RuntimeError("<mask> is not the last token of the tokenizer")


def make_nllb_tokenizer(lines: Iterable[str], out_dir: Path, *, vocab_size: int = 1000) -> NllbTokenizer:
    """Train SentencePiece on `lines` into `out_dir` and build the tokenizer from it."""
    train_sentencepiece(lines, out_dir, vocab_size=vocab_size)
    return load_nllb_tokenizer(out_dir)


def save_nllb_tokenizer(tokenizer: NllbTokenizer, sentencepiece_model: Path, out_dir: Path) -> None:
    """`save_pretrained` in transformers 5 no longer writes the SentencePiece model: copy it."""
    tokenizer.save_pretrained(str(out_dir))
    target = out_dir / SENTENCEPIECE_MODEL
    if sentencepiece_model.resolve() != target.resolve():
        shutil.copyfile(sentencepiece_model, target)
