"""The folder of a `thot-smt` model revision (the `smt-transfer` family), as the build job writes it
and the inference node reads it.

A revision is published under `models/{engineId}/{revision}/` like every other (files first,
`manifest.json` last, every file checksummed; manifest `kind="model-revision"`,
`backend="thot-smt"`). Its files:

| path | what |
|---|---|
| `smt.json` | `SmtFolder`: how text becomes the model's tokens (tokenizer, lowercasing), the word-alignment model type, the decoder settings, the file names below |
| `smt.cfg` | Thot's decoder configuration; `-tm` and `-lm` are paths relative to the folder, so the folder works wherever it is copied |
| `tm/src_trg.*` | the phrase-based translation model: phrase table (`.ttable`), its weights and length tables, and the two HMM word-alignment models (`_swm.*` target→source, `_invswm.*` source→target) that online learning (`train-segment`) updates |
| `lm/trg.lm*` | the target language model: n-gram counts (`trg.lm`), interpolation weights (`.weights`), word-prediction sentences (`.wp`) |
| `truecase.txt` | sil-machine's unigram truecaser model (one line per lowercased word: its casings and counts) |

Translation lowercases and tokenizes the source with sil-machine's Latin word tokenizer, decodes,
truecases the target tokens (capitalising the first word of a segment that starts a sentence when
the truecaser leaves it lowercase, only when the build asked for it with `capitalizeSentenceStart`:
Serval answers the first word as the model gives it, and the unigram truecaser never learns
sentence-initial casing) and detokenizes with the Latin word detokenizer.

Only this module's stdlib-and-pydantic parts load eagerly; Thot is imported where it is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

BACKEND = "thot-smt"
SETTINGS_FILE = "smt.json"
CONFIG_FILE = "smt.cfg"
TM_PREFIX = "tm/src_trg"
LM_PREFIX = "lm/trg.lm"
TRUECASER_FILE = "truecase.txt"

DEFAULT_WEIGHTS = (0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0)
"""Thot's log-linear weights when a build does not tune them (the values of sil-machine's new-model
template)."""


class DecoderSettings(BaseModel):
    """Thot's search settings (`ThotSmtParameters`) for translation and for word graphs."""

    model_config = ConfigDict(extra="forbid")

    translation_options: int = Field(
        default=10, ge=1, description="W: translation options considered per source phrase"
    )
    stack_size: int = Field(default=10, ge=1, description="S: hypotheses kept per stack")
    graph_stack_size: int | None = Field(
        default=5,
        ge=1,
        description="S for word graphs, which must come back while the user types; None: "
        "`stack_size`. On the English→Swahili NT, S=5 halves word-graph time against S=10 and "
        "its translations score the same chrF (40.97 against 40.99)",
    )
    max_phrase_length: int = Field(default=7, ge=1, description="A: longest source phrase in words")
    non_monotonicity: int = Field(default=0, ge=0)
    heuristic: int = Field(default=6, description="h: 0 none, 4 local t, 6 local t+d")
    breadth_first: bool = Field(default=False, description="False: best-first search (`-be`)")
    weights: list[float] = Field(default_factory=lambda: list(DEFAULT_WEIGHTS))


class SmtFolder(BaseModel):
    """`smt.json`: everything the node needs besides Thot's own files."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = 1
    word_alignment_model: str = "hmm"
    tokenizer: str = Field(default="latin", description="sil-machine's LatinWordTokenizer/Detokenizer")
    lowercase: bool = True
    config: str = CONFIG_FILE
    truecaser: str | None = TRUECASER_FILE
    decoder: DecoderSettings = Field(default_factory=DecoderSettings)
    capitalize_sentence_start: bool = Field(
        default=False, description="the build option `capitalizeSentenceStart`: translations capitalise"
    )

    def write(self, folder: Path) -> None:
        (folder / SETTINGS_FILE).write_text(self.model_dump_json(indent=2), encoding="utf-8")
        write_config(folder / self.config, self.decoder)

    @classmethod
    def read(cls, folder: Path) -> SmtFolder:
        return cls.model_validate(json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8")))


def write_config(path: Path, decoder: DecoderSettings) -> None:
    """Thot's configuration file with paths relative to its folder."""
    lines = [
        f"-tm {TM_PREFIX}",
        f"-lm {LM_PREFIX}",
        f"-W {decoder.translation_options}",
        f"-S {decoder.stack_size}",
        f"-A {decoder.max_phrase_length}",
        f"-nomon {decoder.non_monotonicity}",
        f"-h {decoder.heuristic}",
        *([] if decoder.breadth_first else ["-be"]),
        "-tmw " + " ".join(f"{w:g}" for w in decoder.weights),
        "-olp 0 0 1 5 1 0",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def capitalize_sentence_start(tokens: list[str], sentence_start: bool) -> list[str]:
    """Capitalise the first cased word of a sentence-start segment that the truecaser left
    lowercase (sil-machine's unigram truecaser learns casing from non-initial words only)."""
    if not sentence_start:
        return tokens
    for i, token in enumerate(tokens):
        if any(ch.isalpha() for ch in token):
            if token[0].islower():
                return [*tokens[:i], token[0].upper() + token[1:], *tokens[i + 1 :]]
            return tokens
    return tokens


if TYPE_CHECKING:
    from machine.tokenization import LatinWordDetokenizer, LatinWordTokenizer
    from machine.tokenization.detokenizer import Detokenizer
    from machine.translation import TranslationResult
    from machine.translation.thot import ThotSmtModel


def tokenizer() -> LatinWordTokenizer:
    from machine.tokenization import LatinWordTokenizer

    return LatinWordTokenizer()


def detokenizer() -> LatinWordDetokenizer:
    from machine.tokenization import LatinWordDetokenizer

    return LatinWordDetokenizer()


def load_engine(
    folder: Path, settings: SmtFolder | None = None, *, search: DecoderSettings | None = None
) -> ThotSmtModel:
    """The folder's model, ready to translate: Latin tokenizer, lowercasing and truecaser as the
    build trained it; `search` replaces the folder's search limits (W, S, A). Blocking (seconds
    for a large model)."""
    from machine.translation import UnigramTruecaser
    from machine.translation.thot import ThotSmtModel, ThotSmtParameters

    settings = settings or SmtFolder.read(folder)
    parameters = ThotSmtParameters.load(folder / settings.config)
    if search is not None:
        parameters.model_w = search.translation_options
        parameters.decoder_s = search.stack_size
        parameters.model_a = search.max_phrase_length
    truecaser = UnigramTruecaser(folder / settings.truecaser) if settings.truecaser else None
    return ThotSmtModel(
        settings.word_alignment_model,
        parameters,
        source_tokenizer=tokenizer(),
        target_tokenizer=tokenizer(),
        target_detokenizer=detokenizer(),
        lowercase_source=settings.lowercase,
        lowercase_target=settings.lowercase,
        truecaser=truecaser,
    )


def final_text(result: TranslationResult, detok: Detokenizer[str, str], sentence_start: bool = True) -> str:
    """A translation's text with the first word of a sentence capitalised."""
    return detok.detokenize(capitalize_sentence_start(list(result.target_tokens), sentence_start))
