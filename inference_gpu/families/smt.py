"""The `smt-transfer` family: a Thot phrase-based model (`serval_common.thot_smt` describes its
folder) serving translate, n-best, prefix, word graph and train-segment. Importing this module
needs the `smt` extra (sil-machine, sil-thot): without it the node does not claim the family.

**A process per model.** Thot's decoder holds the GIL for the whole of a decode (a word graph of a
long verse takes seconds), so a worker thread would still stall the node's event loop and every
other model. Each loaded model therefore lives in a worker process of its own
(`ProcessPoolExecutor` with one worker, spawned); the node awaits its answers. The decoder is not
safe to share, so one model runs one operation at a time, in arrival order (`_lock`):
translations, word graphs and train-segment never overlap, and a translate sent after a
train-segment sees the trained pair. If the worker dies (killed, out of memory) the call fails
with `WorkerLost` (the node answers "model unavailable"), the model is marked `lost` and tells its
`lost_listeners`: the model manager drops it and announces it UNLOADED, and the next request loads
the revision afresh, replaying the engine's trained segments, so no silently forgetful model is
ever served.

**Word graphs** come from Thot's decoder with the folder's search settings, then are pruned here:
arcs whose best complete path scores more than `GRAPH_BEAM` below the best path are dropped, and
the best-scoring arcs are kept while their words plus the final states stay within
`MAX_GRAPH_WORDS`. That bound keeps graphs usable by sil-machine 1.9.2's unmodified
`InteractiveTranslator`, which SIL's tools use: its error-correction search starts with one
hypothesis per arc word and final state in a `PriorityQueue(maxsize=1000)` and blocks for ever
on the 1,001st. States are renumbered in topological order (Thot's are
not), the initial state is 0, and every arc's alignment is local to its source range and its
target tokens.

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

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine.translation import (
    ErrorCorrectionModel,
    FuzzyEditDistanceWordAlignmentMethod,
    TranslationResult,
    TranslationSources,
)
from machine.translation.thot import ThotSmtModel

from inference_gpu.families.base import Capability, InputTooLong, ServedModel
from serval.translation.v1 import common_pb2, engine_pb2
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings
from serval_common.store import StoreError
from serval_common.thot_smt import SmtFolder, capitalize_sentence_start, detokenizer, load_engine, tokenizer
from serval_common.word_graph_guard import GuardedWordGraphProcessor, to_machine

log = logging.getLogger(__name__)

GRAPH_BEAM = 10.0
"""Arcs whose best path scores more than this (natural log) below the best path are pruned."""
MAX_GRAPH_WORDS = 900
"""At most this many arc words plus final states per word graph (see the module docstring)."""
SCORE_CACHE_ENTRIES = 200_000
"""Memoised translation scores at most (then the memo starts afresh)."""
NBEST_FACTOR = 3
"""n-best asks Thot for this many times n hypotheses: some differ only in segmentation."""
GRAPH_CACHE_ENTRIES = 8
"""Word graphs (with their error-correction processors) kept per model, most recent segments."""
PREFIX_RESULTS_SEARCHED = 50
"""A prefix translation reads at most this many of the processor's results to find n distinct."""


class WorkerLost(StoreError):
    """The model's worker process died. A `StoreError`, so the work item is answered "model
    unavailable"; the manager reloads the revision for the next one."""


def _sources(flags: Any) -> engine_pb2.TranslationSources:
    """sil-machine's TranslationSources flags as ours (an unknown word has none)."""
    mapping = [
        (TranslationSources.SMT, engine_pb2.TRANSLATION_SOURCE_PRIMARY),
        (TranslationSources.TRANSFER, engine_pb2.TRANSLATION_SOURCE_SECONDARY),
        (TranslationSources.PREFIX, engine_pb2.TRANSLATION_SOURCE_HUMAN),
    ]
    return engine_pb2.TranslationSources(values=[value for flag, value in mapping if flag in flags])


_HUMAN = engine_pb2.TranslationSources(values=[engine_pb2.TRANSLATION_SOURCE_HUMAN])
_PRIMARY = engine_pb2.TranslationSources(values=[engine_pb2.TRANSLATION_SOURCE_PRIMARY])
_NO_SOURCE = engine_pb2.TranslationSources()


def _pairs(
    alignment: Any, source_offset: int = 0, target_offset: int = 0
) -> list[common_pb2.AlignedWordPair]:
    return [
        common_pb2.AlignedWordPair(
            source_index=p.source_index + source_offset, target_index=p.target_index + target_offset
        )
        for p in alignment.to_aligned_word_pairs()
    ]


def result_proto(result: TranslationResult, sentence_start: bool, detok: Any) -> engine_pb2.TranslationResult:
    tokens = capitalize_sentence_start(list(result.target_tokens), sentence_start)
    return engine_pb2.TranslationResult(
        translation=detok.detokenize(tokens),
        source_tokens=list(result.source_tokens),
        target_tokens=tokens,
        confidences=list(result.confidences),
        sources=[_sources(s) for s in result.sources],
        alignment=_pairs(result.alignment),
        phrases=[
            engine_pb2.Phrase(
                source_segment_start=p.source_segment_range.start,
                source_segment_end=p.source_segment_range.end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in result.phrases
        ],
    )


@dataclass(frozen=True)
class RawArc:
    """An arc of Thot's own word graph, before the per-arc work (truecasing, confidences, word
    alignment) that only the arcs kept after pruning get."""

    prev_state: int
    next_state: int
    score: float
    words: tuple[str, ...]
    """normalized (lowercased) target words"""
    source_start: int
    source_end: int
    unknown: bool


@dataclass(frozen=True)
class RawGraph:
    arcs: list[RawArc]
    final_states: set[int]
    initial_state_score: float


def prune(
    graph: RawGraph, *, beam: float = GRAPH_BEAM, max_words: int = MAX_GRAPH_WORDS
) -> tuple[list[int], dict[int, int]]:
    """The arcs kept (indices, in topological order) and the states' new numbers (see the module
    docstring): within `beam` of the best path, the best ones while their words and final states
    fit `max_words`, each on a complete path."""
    arcs = graph.arcs
    finals = graph.final_states
    order = _topological_states(arcs)
    forward = {state: -math.inf for state in order}
    forward[0] = 0.0
    outgoing: dict[int, list[int]] = {}
    for i, arc in enumerate(arcs):
        outgoing.setdefault(arc.prev_state, []).append(i)
    for state in order:
        for i in outgoing.get(state, []):
            arc = arcs[i]
            forward[arc.next_state] = max(forward[arc.next_state], forward[state] + arc.score)
    backward = {state: (0.0 if state in finals else -math.inf) for state in order}
    for state in reversed(order):
        for i in outgoing.get(state, []):
            arc = arcs[i]
            backward[state] = max(backward[state], arc.score + backward[arc.next_state])
    best = backward.get(0, -math.inf)
    if not math.isfinite(best):
        return [], {0: 0}
    through = [forward[a.prev_state] + a.score + backward[a.next_state] for a in arcs]
    ranked = sorted((i for i, v in enumerate(through) if v >= best - beam), key=lambda i: -through[i])
    budget = max_words
    while True:
        chosen: set[int] = set()
        words = 0
        for i in ranked:
            words += max(1, len(arcs[i].words))
            if words > budget:
                break
            chosen.add(i)
        kept = _on_complete_paths(arcs, chosen, finals)
        reached = {arcs[i].next_state for i in kept} | {0}
        total = sum(max(1, len(arcs[i].words)) for i in kept) + len(finals & reached)
        if total <= max_words or not kept:
            break
        budget -= total - max_words
    states = [s for s in order if s == 0 or any(arcs[i].next_state == s for i in kept)]
    number = {state: n for n, state in enumerate(states)}
    ordered = sorted(kept, key=lambda i: (number[arcs[i].prev_state], number[arcs[i].next_state], i))
    return ordered, number


def _topological_states(arcs: Sequence[Any]) -> list[int]:
    states = {0} | {a.prev_state for a in arcs} | {a.next_state for a in arcs}
    incoming = dict.fromkeys(states, 0)
    outgoing: dict[int, list[int]] = {}
    for arc in arcs:
        incoming[arc.next_state] += 1
        outgoing.setdefault(arc.prev_state, []).append(arc.next_state)
    ready = sorted(s for s, n in incoming.items() if n == 0)
    order: list[int] = []
    while ready:
        state = ready.pop(0)
        order.append(state)
        for nxt in outgoing.get(state, []):
            incoming[nxt] -= 1
            if incoming[nxt] == 0:
                ready.append(nxt)
    if len(order) != len(states):
        raise ValueError("Thot's word graph has a cycle")
    return order


def _on_complete_paths(arcs: Sequence[Any], kept: set[int], finals: set[int]) -> set[int]:
    """The kept arcs that lie on a path from state 0 to a final state through kept arcs."""
    reached = {0}
    changed = True
    while changed:
        changed = False
        for i in kept:
            if arcs[i].prev_state in reached and arcs[i].next_state not in reached:
                reached.add(arcs[i].next_state)
                changed = True
    ending = set(finals)
    changed = True
    while changed:
        changed = False
        for i in kept:
            if arcs[i].next_state in ending and arcs[i].prev_state not in ending:
                ending.add(arcs[i].prev_state)
                changed = True
    return {i for i in kept if arcs[i].prev_state in reached and arcs[i].next_state in ending}


@dataclass
class _Partial:
    score: float
    arcs: tuple[int, ...]


def complete_prefix(
    graph: engine_pb2.WordGraph, prefix: list[str], last_complete: bool, n: int
) -> list[engine_pb2.TranslationResult]:
    """Up to n distinct best translations of the graph that begin with `prefix`'s words (see the
    module docstring), best first; confidences and alignment come from the graph's arcs."""
    finals = set(graph.final_states)
    outgoing: dict[int, list[int]] = {}
    for i, arc in enumerate(graph.arcs):
        outgoing.setdefault(arc.prev_state, []).append(i)
    states = sorted({0} | {a.prev_state for a in graph.arcs} | {a.next_state for a in graph.arcs})
    keep = max(n, 1) * 2
    table: dict[tuple[int, int], list[_Partial]] = {(0, 0): [_Partial(0.0, ())]}
    for state in states:
        for matched in range(len(prefix) + 1):
            partials = table.get((state, matched))
            if not partials:
                continue
            for i in outgoing.get(state, []):
                arc = graph.arcs[i]
                after = _match(list(arc.target_tokens), prefix, matched, last_complete)
                if after is None:
                    continue
                bucket = table.setdefault((arc.next_state, after), [])
                bucket.extend(_Partial(p.score + arc.score, (*p.arcs, i)) for p in partials)
                bucket.sort(key=lambda p: -p.score)
                del bucket[keep:]
    complete = sorted(
        (p for f in finals for p in table.get((f, len(prefix)), [])),
        key=lambda p: -p.score,
    )
    results: list[engine_pb2.TranslationResult] = []
    seen: set[tuple[str, ...]] = set()
    for partial in complete:
        result = _path_result(graph, [graph.arcs[i] for i in partial.arcs], prefix, len(prefix), [])
        key = tuple(t.lower() for t in result.target_tokens)
        if key in seen:
            continue
        seen.add(key)
        results.append(result)
        if len(results) == n:
            return results
    if results:
        return results
    # No path holds the whole prefix: continue the longest match with the best path from there.
    matched, state, partial = max(
        ((m, s, p) for (s, m), ps in table.items() for p in ps),
        key=lambda item: (item[0], item[2].score),
    )
    rest = _best_path(graph, state, outgoing, finals)
    if rest is None:
        rest = []
    arcs = [graph.arcs[i] for i in partial.arcs]
    return [_path_result(graph, arcs, prefix, matched, [graph.arcs[i] for i in rest])]


def _match(tokens: list[str], prefix: list[str], matched: int, last_complete: bool) -> int | None:
    """How many prefix words are matched after an arc's tokens, or None if they disagree."""
    for j, token in enumerate(tokens):
        k = matched + j
        if k >= len(prefix):
            break
        typed, word = prefix[k].lower(), token.lower()
        partial = k == len(prefix) - 1 and not last_complete
        if not (word == typed or (partial and word.startswith(typed))):
            return None
    return min(len(prefix), matched + len(tokens))


def _best_path(
    graph: engine_pb2.WordGraph, start: int, outgoing: dict[int, list[int]], finals: set[int]
) -> list[int] | None:
    best: dict[int, tuple[float, list[int]] | None] = {}

    def visit(state: int) -> tuple[float, list[int]] | None:
        if state in best:
            return best[state]
        options: list[tuple[float, list[int]]] = [(0.0, [])] if state in finals else []
        for i in outgoing.get(state, []):
            tail = visit(graph.arcs[i].next_state)
            if tail is not None:
                options.append((graph.arcs[i].score + tail[0], [i, *tail[1]]))
        best[state] = max(options, key=lambda o: o[0]) if options else None
        return best[state]

    found = visit(start)
    return None if found is None else found[1]


def _path_result(
    graph: engine_pb2.WordGraph,
    arcs: list[engine_pb2.WordGraphArc],
    prefix: list[str],
    matched: int,
    rest: list[engine_pb2.WordGraphArc],
) -> engine_pb2.TranslationResult:
    """A result from the arcs matching `prefix[:matched]`, the unmatched typed words, then `rest`."""
    tokens: list[str] = []
    confidences: list[float] = []
    sources: list[engine_pb2.TranslationSources] = []
    alignment: list[common_pb2.AlignedWordPair] = []
    phrases: list[engine_pb2.Phrase] = []

    def add_arc(arc: engine_pb2.WordGraphArc) -> None:
        offset = len(tokens)
        for j, token in enumerate(arc.target_tokens):
            k = offset + j
            if k < matched:
                typed = prefix[k]
                tokens.append(typed + token[len(typed) :] if len(token) > len(typed) else typed)
                sources.append(_HUMAN)
            else:
                tokens.append(token)
                sources.append(arc.sources[j])
        confidences.extend(arc.confidences)
        alignment.extend(
            common_pb2.AlignedWordPair(
                source_index=arc.source_segment_start + p.source_index, target_index=offset + p.target_index
            )
            for p in arc.alignment
        )
        phrases.append(
            engine_pb2.Phrase(
                source_segment_start=arc.source_segment_start,
                source_segment_end=arc.source_segment_end,
                target_segment_cut=len(tokens),
            )
        )

    for arc in arcs:
        add_arc(arc)
    for typed in prefix[len(tokens) :]:
        tokens.append(typed)
        confidences.append(1.0)
        sources.append(_HUMAN)
    for arc in rest:
        add_arc(arc)
    if phrases and phrases[-1].target_segment_cut < len(tokens):
        phrases[-1].target_segment_cut = len(tokens)
    elif not phrases and tokens:
        phrases.append(engine_pb2.Phrase(target_segment_cut=len(tokens)))
    return engine_pb2.TranslationResult(
        translation=detokenizer().detokenize(tokens),
        source_tokens=list(graph.source_tokens),
        target_tokens=tokens,
        confidences=confidences,
        sources=sources,
        alignment=alignment,
        phrases=phrases,
    )


class _CachedGraph:
    """A segment's word graph and, once a prefix was asked of it, its error-correction processor."""

    def __init__(self, graph: engine_pb2.WordGraph) -> None:
        self.graph = graph
        self._processor: GuardedWordGraphProcessor | None = None

    def processor(self, ecm: ErrorCorrectionModel, detok: Any) -> GuardedWordGraphProcessor:
        if self._processor is None:
            self._processor = GuardedWordGraphProcessor(
                ecm, detok, to_machine(self.graph, TranslationSources.SMT)
            )
        return self._processor


def prefix_result(
    corrected: TranslationResult,
    words: list[str],
    finished: bool,
    unknown: set[tuple[int, int]],
    detok: Any,
) -> engine_pb2.TranslationResult:
    """Our result of one of the processor's corrected translations: the typed `words` exactly as
    typed (an unfinished last word completed by the graph's word when that begins with it,
    case-insensitively), source `Human`; the other words keep the graph's sources (none for an
    unknown word: an arc over a source range in `unknown`), confidences and alignment. A result
    that does not hold every typed word comes back empty."""
    tokens = list(corrected.target_tokens)
    if len(tokens) < len(words):
        return engine_pb2.TranslationResult()
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
    return engine_pb2.TranslationResult(
        translation=detok.detokenize(tokens),
        source_tokens=list(corrected.source_tokens),
        target_tokens=tokens,
        confidences=confidences,
        sources=sources,
        alignment=_pairs(corrected.alignment),
        phrases=[
            engine_pb2.Phrase(
                source_segment_start=p.source_segment_range.start,
                source_segment_end=p.source_segment_range.end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in corrected.phrases
        ],
    )


def _split_word(result: engine_pb2.TranslationResult, words: list[str], finished: bool) -> bool:
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
            raise ValueError("the segment is empty")
        count = len(list(self.model.source_tokenizer.tokenize(segment)))
        if count > self.max_input_tokens:
            raise InputTooLong(f"the segment has {count} words; at most {self.max_input_tokens} are accepted")

    def translate(self, segment: str, n: int, prefix: str) -> list[bytes]:
        self._check(segment)
        if prefix.strip():
            words, finished = split_prefix(prefix)
            return [r.SerializeToString() for r in self.translate_prefix(segment, words, finished, n)]
        if n == 1:
            return [result_proto(self.model.translate(segment), True, self.detok).SerializeToString()]
        results: list[bytes] = []
        seen: set[tuple[str, ...]] = set()
        for result in self.model.translate_n(n * NBEST_FACTOR, segment):
            key = tuple(t.lower() for t in result.target_tokens)
            if key in seen:
                continue
            seen.add(key)
            results.append(result_proto(result, True, self.detok).SerializeToString())
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
    ) -> list[engine_pb2.TranslationResult]:
        """Up to n distinct translations starting with the typed `words`, best first, from the
        error-correcting processor on the segment's graph (see the module docstring)."""
        entry = self.cached(segment)
        processor = entry.processor(self.ecm, self.detok)
        processor.correct(words, finished)
        unknown = {
            (a.source_segment_start, a.source_segment_end)
            for a in entry.graph.arcs
            if not any(s.values for s in a.sources)
        }
        results: list[engine_pb2.TranslationResult] = []
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

    def graph(self, segment: str, *, sentence_start: bool = True) -> engine_pb2.WordGraph:
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
            if arc.prev_state == 0:
                tokens = capitalize_sentence_start(tokens, sentence_start)
            if len(phrase) == 1 and len(words) == 1:
                alignment = [common_pb2.AlignedWordPair(source_index=0, target_index=0)]
            else:
                alignment = _pairs(self.aligner.align(phrase, words))
            arcs.append(
                engine_pb2.WordGraphArc(
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
        return engine_pb2.WordGraph(
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
            raise ValueError("both segments of a pair to train must hold words")
        self._graphs.clear()
        self.model.train_segment(source, target, sentence_start)
        self._scores.clear()

    def cached_segments(self) -> list[str]:
        """The segments whose graphs the cache holds, least recent first."""
        return list(self._graphs)

    def close(self) -> None:
        self.model.close()


_engine: SmtEngine | None = None


def _worker_load(folder: str, max_input_tokens: int) -> int:
    """In the worker: load the model; its resident memory in bytes."""
    global _engine
    _engine = SmtEngine(Path(folder), max_input_tokens)
    return _resident_bytes()


def _worker_call(method: str, *args: Any) -> Any:
    if _engine is None:
        raise RuntimeError("the model's worker process holds no model")
    return getattr(_engine, method)(*args)


def _resident_bytes() -> int:
    with contextlib.suppress(OSError, ValueError), open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


@dataclass
class SmtModel(ServedModel):
    family = "smt-transfer"
    capabilities = frozenset(
        {
            Capability.TRANSLATE,
            Capability.N_BEST,
            Capability.PREFIX,
            Capability.WORD_GRAPH,
            Capability.TRAIN_SEGMENT,
        }
    )

    manifest: Manifest
    folder: Path
    worker: ProcessPoolExecutor
    memory_bytes: int
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _pending: int = 0
    _applied: set[int] = field(default_factory=set)
    _closed: bool = False
    lost: bool = False
    """The worker process died: the model answers nothing more (see the module docstring)."""
    lost_listeners: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def load(
        cls,
        folder: Path,
        manifest: Manifest,
        node_settings: NodeSettings,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> SmtModel:
        """Start the model's worker process and load the folder there (blocking)."""
        worker = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        try:
            resident = worker.submit(_worker_load, str(folder), node_settings.max_input_tokens).result()
        except BaseException:
            worker.shutdown(wait=False, cancel_futures=True)
            raise
        disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        return cls(manifest, folder, worker, max(resident, disk))

    @property
    def size_bytes(self) -> int:
        return self.memory_bytes

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def applied_segments(self) -> frozenset[int]:
        return frozenset(self._applied)

    async def _call(self, method: str, *args: Any) -> Any:
        if self.lost:
            raise WorkerLost(f"the worker process of model {self.manifest.engine_id} died")
        if self._closed:
            raise RuntimeError("the model is closed")
        self._pending += 1
        try:
            async with self._lock:
                return await self._run(_worker_call, method, *args)
        finally:
            self._pending -= 1

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the worker process; its death marks the model lost."""
        if self.lost:
            raise WorkerLost(f"the worker process of model {self.manifest.engine_id} died")
        try:
            return await asyncio.wrap_future(self.worker.submit(function, *args))
        except BrokenProcessPool as exc:
            first = not self.lost
            self.lost = True
            if first:
                log.error(
                    "smt model worker process died",
                    extra={"engine_id": self.manifest.engine_id, "revision": self.manifest.revision},
                )
                for listener in self.lost_listeners:
                    listener()
            raise WorkerLost(f"the worker process of model {self.manifest.engine_id} died") from exc

    async def cached_segments(self) -> list[str]:
        """The segments whose word graphs the worker's cache holds, least recently used first."""
        segments: list[str] = await self._call("cached_segments")
        return segments

    async def worker_pid(self) -> int:
        """The process id of the model's worker."""
        pid: int = await self._run(os.getpid)
        return pid

    async def translate(
        self, segment: str, n: int, source_code: str, target_code: str, prefix: str = ""
    ) -> list[engine_pb2.TranslationResult]:
        if n < 1:
            raise ValueError("n must be at least 1")
        raw: list[bytes] = await self._call("translate", segment, n, prefix)
        return [engine_pb2.TranslationResult.FromString(r) for r in raw]

    async def word_graph(self, segment: str, source_code: str, target_code: str) -> engine_pb2.WordGraph:
        return engine_pb2.WordGraph.FromString(await self._call("word_graph", segment))

    async def train_segment(self, source: str, target: str, sentence_start: bool, seq: int) -> None:
        """Learn the pair at once; a `seq` already applied is skipped (replay and fan-out may both
        deliver it). A seq of 0 (none) is always applied."""
        if seq and seq in self._applied:
            return
        self._pending += 1
        try:
            async with self._lock:
                if seq and seq in self._applied:
                    return
                await self._run(_worker_call, "train_segment", source, target, sentence_start)
                if seq:
                    self._applied.add(seq)
        finally:
            self._pending -= 1

    async def close(self, *, drain: bool = True) -> None:
        """Stop taking requests; with `drain`, let the queued ones finish; then end the worker
        process (which frees the model)."""
        self._closed = True
        if drain:
            while self._pending:
                await asyncio.sleep(0.01)
        await asyncio.to_thread(self.worker.shutdown, wait=True, cancel_futures=not drain)
