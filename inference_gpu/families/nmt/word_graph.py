"""A word graph (lattice) from the n-best hypotheses of one beam search.

The hypotheses are merged into a trie over target words: hypotheses that share their first
words (with the same pieces) share those arcs. Each arc carries one word; its `score` is the
sum of the natural-log probabilities of the pieces that make the word (a piece that spans two
words counts for the first; a piece with no text of its own for the next).

The last arc of every hypothesis is its own and leads to its own final state. It also carries
the end-of-sentence log-probability and the length-penalty correction, so that the sum of the
arc scores along a hypothesis' path equals the backend's ranking score
`(sum(log p) + log p(</s>)) / steps ** length_penalty`. Every path from state 0 to a final state
is exactly one hypothesis, so the graph's best path is the backend's best hypothesis, which is
what `translate` returns. `initial_state_score` is 0.

An arc's source range is the source word its word is aligned to (by attention, as in
`translate`'s alignment), with the local alignment (0, 0); the whole segment when nothing is
aligned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inference_gpu.families.nmt.backends.base import Hypothesis
from inference_gpu.families.nmt.results import word_alignment, word_confidences
from serval_common.core import AlignedWordPair, TranslationSource, WordGraph, WordGraphArc
from serval_common.nllb_tokenizer import DecodedTarget, EncodedSource

_LOCAL_PAIR = (AlignedWordPair(0, 0),)

ArcKey = tuple[str, tuple[str, ...]]


@dataclass
class _State:
    children: dict[ArcKey, tuple[int, float]] = field(default_factory=dict)
    """Non-final arcs out of this state: (word, its pieces) → (next state, arc score)."""


def piece_groups(target: DecodedTarget, piece_count: int) -> list[list[int]]:
    """A partition of the pieces `0..piece_count` over the words of `target`: each piece belongs
    to the first word it overlaps; a piece that overlaps none belongs to the next word, or to the
    last word at the end."""
    word_count = len(target.tokens)
    owners = [-1] * piece_count
    for word, pieces in enumerate(target.token_pieces):
        for piece in pieces:
            if piece < piece_count and owners[piece] < 0:
                owners[piece] = word
    following = word_count - 1
    for piece in reversed(range(piece_count)):
        if owners[piece] < 0:
            owners[piece] = following
        else:
            following = owners[piece]
    groups: list[list[int]] = [[] for _ in range(word_count)]
    for piece, word in enumerate(owners):
        groups[word].append(piece)
    return groups


class WordGraphBuilder:
    def __init__(self, source: EncodedSource) -> None:
        self.source = source
        self.states: list[_State] = [_State()]
        self.arcs: list[WordGraphArc] = []
        self.final_states: list[int] = []
        self._seen: set[tuple[str, ...]] = set()

    def add(self, target: DecodedTarget, hypothesis: Hypothesis) -> bool:
        """Add one hypothesis (best first); False if it has no words or repeats an earlier one."""
        words = tuple(target.tokens)
        if not words or words in self._seen:
            return False
        self._seen.add(words)
        groups = piece_groups(target, len(hypothesis.tokens))
        confidences = word_confidences(target, hypothesis.log_probs)
        aligned = {t: s for s, t in word_alignment(self.source, target, hypothesis.attention)}
        state, path_score = 0, 0.0
        for index, word in enumerate(words):
            pieces = groups[index]
            key: ArcKey = (word, tuple(hypothesis.tokens[i] for i in pieces))
            last = index == len(words) - 1
            existing = None if last else self.states[state].children.get(key)
            if existing is not None:
                state, score = existing
                path_score += score
                continue
            score = sum(hypothesis.log_probs[i] for i in pieces)
            if last:
                score = hypothesis.score - path_score
            next_state = len(self.states)
            self.states.append(_State())
            if not last:
                self.states[state].children[key] = (next_state, score)
            self.arcs.append(
                self._arc(state, next_state, score, word, confidences[index], aligned.get(index))
            )
            state, path_score = next_state, path_score + score
        self.final_states.append(state)
        return True

    def _arc(
        self,
        prev_state: int,
        next_state: int,
        score: float,
        word: str,
        confidence: float,
        source_word: int | None,
    ) -> WordGraphArc:
        alignment: tuple[AlignedWordPair, ...] = ()
        start, end = 0, len(self.source.words)
        if source_word is not None:
            start, end, alignment = source_word, source_word + 1, _LOCAL_PAIR
        return WordGraphArc(
            prev_state=prev_state,
            next_state=next_state,
            score=score,
            target_tokens=(word,),
            confidences=(confidence,),
            source_segment_start=start,
            source_segment_end=end,
            alignment=alignment,
            sources=(TranslationSource.PRIMARY,),
        )

    def build(self, empty_score: float = 0.0) -> WordGraph:
        """The graph; when no hypothesis had a word, state 0 is final and scores `empty_score`."""
        if not self.arcs:
            return WordGraph(tuple(self.source.words), empty_score, (0,), ())
        return WordGraph(tuple(self.source.words), 0.0, tuple(self.final_states), tuple(self.arcs))


def build_word_graph(source: EncodedSource, hypotheses: list[tuple[DecodedTarget, Hypothesis]]) -> WordGraph:
    """The word graph of hypotheses sorted best first. When no hypothesis has a word, the graph
    has no arcs, state 0 is final and `initial_state_score` is the best score."""
    builder = WordGraphBuilder(source)
    for target, hypothesis in hypotheses:
        builder.add(target, hypothesis)
    if not hypotheses:
        return WordGraph(tuple(source.words), 0.0, (), ())
    return builder.build(empty_score=hypotheses[0][1].score)
