"""What every scenario of one model shares: the CTranslate2 folder, the verses and the decoding and
thread settings, so baselines and the full path do the same work."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from serval_common.nllb_tokenizer import NllbTokenizer
from serval_common.settings import NodeSettings
from tests.corpus import EBIBLE

CORPUS = EBIBLE / "engwebp.txt"
SOURCE_CODE = "eng_Latn"
TARGET_CODE = "swh_Latn"


def verses(count: int, corpus: Path = CORPUS) -> list[str]:
    """`count` English verses spread evenly over the New Testament (blank and merged verses skipped),
    so short and long verses mix as they do in real traffic."""
    lines = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines()]
    usable = [line for line in lines if line and line != "<range>"]
    if count > len(usable):
        raise ValueError(f"{corpus} has only {len(usable)} verses")
    step = len(usable) / count
    return [usable[int(i * step)] for i in range(count)]


@dataclass(frozen=True)
class Workload:
    """One model and its settings. `max_decoding_length` is the node's setting: CTranslate2 is given
    that many tokens after the target-language prefix."""

    name: str
    folder: Path
    sentences: list[str]
    node: NodeSettings
    max_positions: int | None = None

    @property
    def tokenizer(self) -> NllbTokenizer:
        return NllbTokenizer.from_folder(self.folder)

    def sources(self) -> list[list[str]]:
        tokenizer = self.tokenizer
        return [tokenizer.encode(sentence, SOURCE_CODE).tokens for sentence in self.sentences]

    @property
    def max_length(self) -> int:
        """CTranslate2's `max_decoding_length`, as the node's backend computes it."""
        length = self.node.max_decoding_length + 1
        return min(length, self.max_positions - 1) if self.max_positions else length

    def vocabulary(self) -> list[str]:
        for name in ("shared_vocabulary.json", "target_vocabulary.json"):
            if (self.folder / name).is_file():
                return list(json.loads((self.folder / name).read_text(encoding="utf-8")))
        text = (self.folder / "shared_vocabulary.txt").read_text(encoding="utf-8")
        return text.rstrip("\n").split("\n")
