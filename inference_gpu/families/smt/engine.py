"""The Thot engine of the `smt-transfer` family (`inference_gpu.families.smt.model`): a loaded Thot model
and its operations (translate, n-best, prefix, word graph, train-segment), run inside the model's
worker process (`inference_gpu.families.smt.worker`), answering in the node protocol's messages.
The word graphs it makes are pruned by `inference_gpu.families.smt.word_graph`.

**Prefix-constrained translation** runs sil-machine's error-correcting word-graph processing
(`ErrorCorrectionWordGraphProcessor`, guarded: `serval_common.word_graph_guard`) on the segment's
word graph, as sil-machine's `InteractiveTranslator` does on a client: the typed words are aligned
to the graph's paths with an edit-distance model, so a typed word the graph does not hold (a typo,
a word of the translator's own) still leads to the graph's best continuation after it. Each result
starts with the prefix's words as typed (source `Human`; a typed word the graph did not have gets
confidence 1); an unfinished last word is completed when the graph's word begins with it. Where the
processor yields nothing (an empty graph), the graph search of `complete_prefix` answers: its paths
matching the prefix's words, else the longest match continued by the best path.

**A graph cache.** A translator typing asks for the same segment again and again (a word graph,
then a prefix translation at each word), so the worker keeps the last `GRAPH_CACHE_ENTRIES`
segments' graphs, each with its processor (which corrects incrementally from the previous prefix).
`train_segment` empties the cache: the model's graphs change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from machine.translation import (
    ErrorCorrectionModel,
    FuzzyEditDistanceWordAlignmentMethod,
    TranslationResult,
    TranslationSources,
)
from machine.translation.thot import ThotSmtModel

from inference_gpu.families.base import BadInput, InputTooLong
from inference_gpu.families.smt.word_graph import RawArc, RawGraph, complete_prefix, prune
from serval.inference.v1 import node_pb2
from serval_common.core import TranslationSource
from serval_common.node_codec import graph_from_wire
from serval_common.thot_smt import SmtFolder, capitalize_sentence_start, detokenizer, load_engine, tokenizer
from serval_common.word_graph_guard import GuardedWordGraphProcessor, to_machine

SCORE_CACHE_ENTRIES = 200_000
"""Memoised translation scores at most (then the memo starts afresh)."""
NBEST_FACTOR = 3
"""n-best asks Thot for this many times n hypotheses: some differ only in segmentation."""
GRAPH_CACHE_ENTRIES = 8
"""Word graphs (with their error-correction processors) kept per model, most recent segments."""
PREFIX_RESULTS_SEARCHED = 50
"""A prefix translation reads at most this many of the processor's results to find n distinct."""


def _sources(flags: Any) -> int:
    """sil-machine's TranslationSources flags as the node protocol's bits (an unknown word has none)."""
    mapping = [
        (TranslationSources.SMT, TranslationSource.PRIMARY),
        (TranslationSources.TRANSFER, TranslationSource.SECONDARY),
        (TranslationSources.PREFIX, TranslationSource.HUMAN),
    ]
    return sum(ours.value for flag, ours in mapping if flag in flags)


_HUMAN = TranslationSource.HUMAN.value
_PRIMARY = TranslationSource.PRIMARY.value
_NO_SOURCE = TranslationSource.NONE.value


def _pairs(alignment: Any, source_offset: int = 0, target_offset: int = 0) -> list[node_pb2.AlignedWordPair]:
    return [
        node_pb2.AlignedWordPair(
            source_index=p.source_index + source_offset, target_index=p.target_index + target_offset
        )
        for p in alignment.to_aligned_word_pairs()
    ]


def result_proto(result: TranslationResult, sentence_start: bool, detok: Any) -> node_pb2.TranslationResult:
    tokens = capitalize_sentence_start(list(result.target_tokens), sentence_start)
    return node_pb2.TranslationResult(
        translation=detok.detokenize(tokens),
        source_tokens=list(result.source_tokens),
        target_tokens=tokens,
        confidences=list(result.confidences),
        sources=[_sources(s) for s in result.sources],
        alignment=_pairs(result.alignment),
        phrases=[
            node_pb2.Phrase(
                source_segment_start=p.source_segment_range.start,
                source_segment_end=p.source_segment_range.end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in result.phrases
        ],
    )


class _CachedGraph:
    """A segment's word graph and, once a prefix was asked of it, its error-correction processor."""

    def __init__(self, graph: node_pb2.WordGraph) -> None:
        self.graph = graph
        self._processor: GuardedWordGraphProcessor | None = None

    def processor(self, ecm: ErrorCorrectionModel, detok: Any) -> GuardedWordGraphProcessor:
        if self._processor is None:
            self._processor = GuardedWordGraphProcessor(
                ecm, detok, to_machine(graph_from_wire(self.graph), TranslationSources.SMT)
            )
        return self._processor


def prefix_result(
    corrected: TranslationResult,
    words: list[str],
    finished: bool,
    unknown: set[tuple[int, int]],
    detok: Any,
) -> node_pb2.TranslationResult:
    """Our result of one of the processor's corrected translations: the typed `words` exactly as
    typed (an unfinished last word completed by the graph's word when that begins with it,
    case-insensitively), source `Human`; the other words keep the graph's sources (none for an
    unknown word: an arc over a source range in `unknown`), confidences and alignment. A result
    that does not hold every typed word comes back empty."""
    tokens = list(corrected.target_tokens)
    if len(tokens) < len(words):
        return node_pb2.TranslationResult()
    confidences = list(corrected.confidences)
    for k, typed in enumerate(words):
        token = tokens[k]
        if finished or k < len(words) - 1:
            tokens[k] = typed
        elif not token.startswith(typed):
            tokens[k] = typed + token[len(typed) :] if token.lower().startswith(typed.lower()) else typed
        if confidences[k] < 0:
            confidences[k] = 1.0
    sources = [_HUMAN] * len(words)
    cut = 0
    for phrase in corrected.phrases:
        span = (phrase.source_segment_range.start, phrase.source_segment_range.end)
        for j in range(max(cut, len(words)), phrase.target_segment_cut):
            sources.append(_NO_SOURCE if span in unknown else _sources(corrected.sources[j]))
        cut = phrase.target_segment_cut
    sources.extend(_sources(s) for s in corrected.sources[len(sources) :])
    return node_pb2.TranslationResult(
        translation=detok.detokenize(tokens),
        source_tokens=list(corrected.source_tokens),
        target_tokens=tokens,
        confidences=confidences,
        sources=sources,
        alignment=_pairs(corrected.alignment),
        phrases=[
            node_pb2.Phrase(
                source_segment_start=p.source_segment_range.start,
                source_segment_end=p.source_segment_range.end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in corrected.phrases
        ],
    )


def _split_word(result: node_pb2.TranslationResult, words: list[str], finished: bool) -> bool:
    """Whether the result leaves an unfinished last word as typed and follows it with a word that
    begins with it ("… ver very …"): a worse spelling of the result that completes the word."""
    if finished or not words or len(result.target_tokens) <= len(words):
        return False
    typed = words[-1].lower()
    kept, following = result.target_tokens[len(words) - 1], result.target_tokens[len(words)]
    return kept.lower() == typed and following.lower().startswith(typed)


def split_prefix(prefix: str) -> tuple[list[str], bool]:
    """The typed prefix's words, and whether its last word is finished (a space follows it, or it
    is punctuation)."""
    words = list(tokenizer().tokenize(prefix))
    finished = not words or prefix[-1:].isspace() or not any(ch.isalnum() for ch in words[-1])
    return words, finished


class SmtEngine:
    """A loaded Thot model and the operations on it; runs inside the model's worker process."""

    def __init__(self, folder: Path, max_input_tokens: int) -> None:
        self.settings = SmtFolder.read(folder)
        self.model: ThotSmtModel = load_engine(folder, self.settings)
        self.max_input_tokens = max_input_tokens
        self.detok = detokenizer()
        self._scores: dict[tuple[str | None, str | None], float] = {}
        self.aligner = FuzzyEditDistanceWordAlignmentMethod()
        self.model.word_aligner = self.aligner  # the setter installs the model's own scorer…
        self.aligner.score_selector = self._select_score  # …replaced by the memoised one
        self.ecm = ErrorCorrectionModel()
        self._graphs: OrderedDict[str, _CachedGraph] = OrderedDict()

    def _check(self, segment: str) -> None:
        if not segment.strip():
            raise BadInput("the segment is empty")
        count = len(list(self.model.source_tokenizer.tokenize(segment)))
        if count > self.max_input_tokens:
            raise InputTooLong(f"the segment has {count} words; at most {self.max_input_tokens} are accepted")

    def translate(self, segment: str, n: int, prefix: str) -> list[bytes]:
        self._check(segment)
        if prefix.strip():
            words, finished = split_prefix(prefix)
            return [r.SerializeToString() for r in self.translate_prefix(segment, words, finished, n)]
        if n == 1:
            result = self.model.translate(segment)
            return [
                result_proto(result, self.settings.capitalize_sentence_start, self.detok).SerializeToString()
            ]
        results: list[bytes] = []
        seen: set[tuple[str, ...]] = set()
        for result in self.model.translate_n(n * NBEST_FACTOR, segment):
            key = tuple(t.lower() for t in result.target_tokens)
            if key in seen:
                continue
            seen.add(key)
            results.append(
                result_proto(result, self.settings.capitalize_sentence_start, self.detok).SerializeToString()
            )
            if len(results) == n:
                break
        return results

    def cached(self, segment: str) -> _CachedGraph:
        """The segment's word graph, from the cache or made now (and cached)."""
        entry = self._graphs.get(segment)
        if entry is not None:
            self._graphs.move_to_end(segment)
            return entry
        entry = _CachedGraph(self.graph(segment))
        self._graphs[segment] = entry
        while len(self._graphs) > GRAPH_CACHE_ENTRIES:
            self._graphs.popitem(last=False)
        return entry

    def translate_prefix(
        self, segment: str, words: list[str], finished: bool, n: int
    ) -> list[node_pb2.TranslationResult]:
        """Up to n distinct translations starting with the typed `words`, best first, from the
        error-correcting processor on the segment's graph (see the module docstring)."""
        entry = self.cached(segment)
        processor = entry.processor(self.ecm, self.detok)
        processor.correct(words, finished)
        unknown = {
            (a.source_segment_start, a.source_segment_end) for a in entry.graph.arcs if not any(a.sources)
        }
        results: list[node_pb2.TranslationResult] = []
        seen: set[tuple[str, ...]] = set()
        for searched, corrected in enumerate(processor.get_results(), 1):
            result = prefix_result(corrected, words, finished, unknown, self.detok)
            key = tuple(t.lower() for t in result.target_tokens)
            if result.target_tokens and key not in seen and not _split_word(result, words, finished):
                seen.add(key)
                results.append(result)
            if len(results) == n or searched >= PREFIX_RESULTS_SEARCHED:
                break
        return results or complete_prefix(entry.graph, words, finished, n)

    def raw_graph(self, normalized: list[str]) -> RawGraph:
        from machine.translation.thot.thot_utils import to_sentence, unescape_token

        # sil-machine 1.9.2 exposes Thot's decoder only through ThotSmtModel.get_word_graph, which
        # aligns and scores every arc before any pruning (seconds on a long verse).
        decoder = self.model._get_decoder()
        stack_size = decoder.s
        decoder.s = self.settings.decoder.graph_stack_size or stack_size
        try:
            thot = decoder.get_word_graph(to_sentence(normalized))
        finally:
            decoder.s = stack_size
        arcs = []
        for i in range(thot.num_arcs):
            arc = thot.get_arc(i)
            arcs.append(
                RawArc(
                    arc.in_state,
                    arc.out_state,
                    arc.score,
                    tuple(unescape_token(w) for w in arc.words),
                    arc.source_start_index - 1,
                    arc.source_end_index,
                    arc.is_unknown,
                )
            )
        return RawGraph(arcs, set(thot.final_states), thot.initial_state_score)

    def graph(self, segment: str, *, sentence_start: bool = True) -> node_pb2.WordGraph:
        """Thot's word graph, pruned, then truecased, scored and aligned arc by arc."""
        source_tokens = list(self.model.source_tokenizer.tokenize(segment))
        normalized = [t.lower() for t in source_tokens] if self.settings.lowercase else source_tokens
        raw = self.raw_graph(normalized)
        kept, number = prune(raw)
        arcs = []
        for i in kept:
            arc = raw.arcs[i]
            words = list(arc.words)
            phrase = normalized[arc.source_start : arc.source_end]
            tokens = list(self.model.truecaser.truecase(words)) if self.model.truecaser else words
            if arc.prev_state == 0 and self.settings.capitalize_sentence_start:
                tokens = capitalize_sentence_start(tokens, sentence_start)
            if len(phrase) == 1 and len(words) == 1:
                alignment = [node_pb2.AlignedWordPair(source_index=0, target_index=0)]
            else:
                alignment = _pairs(self.aligner.align(phrase, words))
            arcs.append(
                node_pb2.WordGraphArc(
                    prev_state=number[arc.prev_state],
                    next_state=number[arc.next_state],
                    score=arc.score,
                    target_tokens=tokens,
                    confidences=[self._confidence(phrase, w) for w in words],
                    source_segment_start=arc.source_start,
                    source_segment_end=arc.source_end,
                    alignment=alignment,
                    sources=[_NO_SOURCE if arc.unknown else _PRIMARY] * len(words),
                )
            )
        return node_pb2.WordGraph(
            source_tokens=source_tokens,
            initial_state_score=raw.initial_state_score,
            final_states=sorted(number[s] for s in raw.final_states if s in number),
            arcs=arcs,
        )

    def _score(self, source: str | None, target: str | None) -> float:
        """The symmetrized alignment model's translation score, memoised until the model learns
        (each lookup costs ~0.1 ms in sil-machine, and a graph asks for the same pairs often)."""
        key = (source, target)
        value = self._scores.get(key)
        if value is None:
            if len(self._scores) > SCORE_CACHE_ENTRIES:
                self._scores.clear()
            value = self.model.symmetrized_word_alignment_model.get_translation_score(source, target)
            self._scores[key] = value
        return value

    def _select_score(self, source: Sequence[str], i: int, target: Sequence[str], j: int) -> float:
        return self._score(None if i == -1 else source[i], None if j == -1 else target[j])

    def _confidence(self, phrase: list[str], word: str) -> float:
        """sil-machine's IBM-1 word confidence over the arc's source phrase."""
        return max([self._score(None, word), *(self._score(s, word) for s in phrase)])

    def word_graph(self, segment: str) -> bytes:
        self._check(segment)
        return self.cached(segment).graph.SerializeToString()

    def train_segment(self, source: str, target: str, sentence_start: bool) -> None:
        if not source.strip() or not target.strip():
            raise BadInput("both segments of a pair to train must hold words")
        self._graphs.clear()
        self.model.train_segment(source, target, sentence_start)
        self._scores.clear()

    def cached_segments(self) -> list[str]:
        """The segments whose graphs the cache holds, least recent first."""
        return list(self._graphs)

    def close(self) -> None:
        self.model.close()
