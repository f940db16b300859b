"""Translation results and word alignments."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Flag, auto


class InvalidResult(ValueError):
    """A result whose parts do not fit together (a programming error in whoever built it)."""


class TranslationSource(Flag):
    """Where a target word came from (several at once in a merged word graph)."""

    NONE = 0
    PRIMARY = auto()
    """The engine's own model."""
    SECONDARY = auto()
    HUMAN = auto()
    """A translation a person confirmed (train-segment)."""


@dataclass(frozen=True, slots=True)
class AlignedWordPair:
    source_index: int
    target_index: int
    score: float | None = None
    """The link's probability, where the aligner gives one (word-alignment engines)."""

    def __post_init__(self) -> None:
        if self.source_index < 0 or self.target_index < 0:
            raise InvalidResult(f"an aligned pair has a negative index: {self}")


@dataclass(frozen=True, slots=True)
class Phrase:
    """Target words up to `target_segment_cut` translate source words [start, end)."""

    source_segment_start: int
    source_segment_end: int
    target_segment_cut: int

    def __post_init__(self) -> None:
        if not 0 <= self.source_segment_start <= self.source_segment_end or self.target_segment_cut < 0:
            raise InvalidResult(f"a phrase's ranges are not ordered: {self}")


def check_alignment(alignment: Iterable[AlignedWordPair], sources: int, targets: int, what: str) -> None:
    for pair in alignment:
        if pair.source_index >= sources or pair.target_index >= targets:
            raise InvalidResult(
                f"{what} aligns ({pair.source_index}, {pair.target_index}) past its "
                f"{sources} source and {targets} target words"
            )


@dataclass(frozen=True, slots=True)
class TranslationResult:
    """One translation of a segment. `confidences` and `alignment` are empty when the caller asked
    for the text only (`Detail.TEXT`); otherwise there is one confidence and one source per
    target word."""

    translation: str
    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    confidences: tuple[float, ...] = ()
    sources: tuple[TranslationSource, ...] = ()
    alignment: tuple[AlignedWordPair, ...] = ()
    phrases: tuple[Phrase, ...] = field(default=())

    def __post_init__(self) -> None:
        targets = len(self.target_tokens)
        for name in ("confidences", "sources"):
            count = len(getattr(self, name))
            if count not in (0, targets):
                raise InvalidResult(f"{count} {name} for {targets} target words")
        if not all(math.isfinite(c) for c in self.confidences):
            raise InvalidResult("a confidence is not a finite number")
        check_alignment(self.alignment, len(self.source_tokens), targets, "a translation")
        cut = 0
        for phrase in self.phrases:
            if phrase.target_segment_cut < cut or phrase.target_segment_cut > targets:
                raise InvalidResult(f"phrase cuts are not ascending within {targets} target words")
            if phrase.source_segment_end > len(self.source_tokens):
                raise InvalidResult(f"a phrase ends past the {len(self.source_tokens)} source words")
            cut = phrase.target_segment_cut


@dataclass(frozen=True, slots=True)
class WordAlignmentResult:
    """The alignment of one sentence pair: which source word each target word links to."""

    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    alignment: tuple[AlignedWordPair, ...]

    def __post_init__(self) -> None:
        check_alignment(self.alignment, len(self.source_tokens), len(self.target_tokens), "a word alignment")
