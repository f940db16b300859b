"""A SentencePiece model and an `NllbTokenizer` in the real NLLB-200 id order, made from a small corpus.

The id order is `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, the pieces, the language codes (all 202 in
NLLB-200; a checkpoint may have fewer), `<mask>`.
`NllbTokenizer` puts `<mask>` before the language codes unless it is left out when loading and added
back afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serval_common.languages import NLLB_LANGUAGE_CODES, describe_languages

if TYPE_CHECKING:
    from transformers import NllbTokenizer

SENTENCEPIECE_MODEL = "sentencepiece.bpe.model"
TOKENIZER_JSON = "tokenizer.json"
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


class TokenizerProblem(ValueError):
    """A tokenizer that a fine-tune or a node would misread; the message says what is wrong."""


def load_nllb_tokenizer(model_dir: Path) -> NllbTokenizer:
    """The tokenizer of `model_dir`, checked (`check_nllb_tokenizer`).

    A folder with `tokenizer.json` (transformers 5 saves only that, transformers 4 that and the
    SentencePiece model) loads as saved. A folder with only `sentencepiece.bpe.model` gets the
    language codes its `tokenizer_config.json` or `special_tokens_map.json` lists (all 202 NLLB-200
    codes where they list none, as transformers 4's slow `NllbTokenizer` had them), after the
    pieces, then `<mask>`: NLLB's id order, which transformers 5 would otherwise not give it.
    """
    from transformers import NllbTokenizer

    if (model_dir / TOKENIZER_JSON).is_file():
        tokenizer = NllbTokenizer.from_pretrained(str(model_dir))
    else:
        codes = saved_language_codes(model_dir) or list(NLLB_LANGUAGE_CODES)
        tokenizer = NllbTokenizer.from_pretrained(
            str(model_dir), additional_special_tokens=codes, mask_token=None
        )
        tokenizer.add_special_tokens({"mask_token": "<mask>"})
    check_nllb_tokenizer(tokenizer)
    return tokenizer


LANGUAGE_CODE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")
"""The shape of an NLLB language code: ISO 639-3 language, underscore, ISO 15924 script."""


def saved_language_codes(model_dir: Path) -> list[str]:
    """The language codes the tokenizer files beside a SentencePiece model list: those
    `added_tokens_decoder` gives ids (transformers 4.38 and later) in id order, then any others
    in the order listed."""
    ids = saved_token_ids(model_dir)
    listed = [token for token, _ in sorted(ids.items(), key=lambda item: item[1])]
    for name, keys in (
        ("tokenizer_config.json", ("additional_special_tokens", "extra_special_tokens")),
        ("special_tokens_map.json", ("additional_special_tokens",)),
    ):
        config = _read_json(model_dir / name)
        for key in keys:
            listed += _token_list(config.get(key))
    return [token for token in dict.fromkeys(listed) if LANGUAGE_CODE.match(token)]


def saved_token_ids(model_dir: Path) -> dict[str, int]:
    """The ids `tokenizer_config.json`'s `added_tokens_decoder` gives its tokens (empty without it)."""
    decoder = _read_json(model_dir / "tokenizer_config.json").get("added_tokens_decoder")
    if not isinstance(decoder, dict):
        return {}
    return {
        entry["content"]: int(token_id)
        for token_id, entry in decoder.items()
        if isinstance(entry, dict) and isinstance(entry.get("content"), str) and str(token_id).isdigit()
    }


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokenizerProblem(f"{path.name} is not valid JSON ({exc}); fix or remove it.") from None
    return value if isinstance(value, dict) else {}


def _token_list(value: object) -> list[str]:
    """A list of tokens as tokenizer files write it: strings, or objects with `content`."""
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, list):
        return []
    tokens = [entry.get("content") if isinstance(entry, dict) else entry for entry in value]
    return [token for token in tokens if isinstance(token, str)]


def tokenizer_languages(tokenizer: NllbTokenizer) -> list[str]:
    """The language codes the tokenizer maps to ids of their own (not `<unk>`), in id order: the
    NLLB-200 codes it has and any other code-shaped token added to it."""
    vocabulary = tokenizer.get_vocab()
    codes = {code: vocabulary[code] for code in NLLB_LANGUAGE_CODES if code in vocabulary}
    codes.update(
        (token, token_id)
        for token, token_id in tokenizer.get_added_vocab().items()
        if LANGUAGE_CODE.match(token)
    )
    unknown = vocabulary.get("<unk>")
    return [code for code, token_id in sorted(codes.items(), key=lambda item: item[1]) if token_id != unknown]


def check_nllb_tokenizer(tokenizer: NllbTokenizer, required: Sequence[str] = ()) -> None:
    """NLLB's layout, which the model's embedding rows and the nodes rely on: `<s>`, `<pad>`,
    `</s>`, `<unk>` are ids 0..3 and `<mask>` is the last token; and each `required` code has an id
    of its own. Raises `TokenizerProblem`."""
    vocabulary = tokenizer.get_vocab()
    special_ids = [vocabulary.get(token) for token in SPECIAL_TOKENS]
    if special_ids != [0, 1, 2, 3]:
        shown = ", ".join(
            f"{token}={token_id}" for token, token_id in zip(SPECIAL_TOKENS, special_ids, strict=True)
        )
        raise TokenizerProblem(
            f"the tokenizer's special tokens have ids {shown}, not 0, 1, 2, 3 as NLLB's; "
            "use the tokenizer the checkpoint was trained with."
        )
    mask = vocabulary.get("<mask>")
    if mask != len(tokenizer) - 1:
        where = "is missing" if mask is None else f"has id {mask}"
        raise TokenizerProblem(
            f"the tokenizer's <mask> {where}, but NLLB's is the last token (id {len(tokenizer) - 1}) "
            "after the language codes; use the tokenizer the checkpoint was trained with."
        )
    known = tokenizer_languages(tokenizer)
    missing = [code for code in required if code not in known]
    if missing:
        raise TokenizerProblem(
            f"the tokenizer does not know {', '.join(missing)}; it knows {describe_languages(known)}."
        )


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
