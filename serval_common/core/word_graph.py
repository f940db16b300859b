"""Word graphs: the lattice of an engine's hypotheses for one segment (interactive translation)."""

from __future__ import annotations

from dataclasses import dataclass

from serval_common.core.results import AlignedWordPair, InvalidResult, TranslationSource, check_alignment


@dataclass(frozen=True, slots=True)
class WordGraphArc:
    """Target words between two states, translating source words [start, end); its alignment is
    local to those ranges (source index 0 is `source_segment_start`)."""

    prev_state: int
    next_state: int
    score: float
    target_tokens: tuple[str, ...]
    confidences: tuple[float, ...]
    source_segment_start: int
    source_segment_end: int
    alignment: tuple[AlignedWordPair, ...]
    sources: tuple[TranslationSource, ...]

    def __post_init__(self) -> None:
        if self.prev_state < 0 or self.next_state < 0:
            raise InvalidResult(f"an arc has a negative state: {self.prev_state} → {self.next_state}")
        if not 0 <= self.source_segment_start <= self.source_segment_end:
            raise InvalidResult("an arc's source range is not ordered")
        words = len(self.target_tokens)
        if len(self.confidences) != words or len(self.sources) != words:
            raise InvalidResult(f"an arc of {words} words has {len(self.confidences)} confidences")
        check_alignment(self.alignment, self.source_segment_end - self.source_segment_start, words, "an arc")


@dataclass(frozen=True, slots=True)
class WordGraph:
    source_tokens: tuple[str, ...]
    initial_state_score: float
    final_states: tuple[int, ...]
    arcs: tuple[WordGraphArc, ...]

    def __post_init__(self) -> None:
        sources = len(self.source_tokens)
        if any(arc.source_segment_end > sources for arc in self.arcs):
            raise InvalidResult(f"an arc covers source words past the segment's {sources}")
        if any(state < 0 for state in self.final_states):
            raise InvalidResult("a final state is negative")

    @property
    def is_empty(self) -> bool:
        return not self.arcs
