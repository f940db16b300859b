"""Word-graph algorithms of the `smt-transfer` family (`inference_gpu.families.smt.model`), on plain
data: pruning Thot's raw word graph, and the graph search that completes a typed prefix.

**Word graphs** come from Thot's decoder with the folder's search settings, then are pruned here:
arcs whose best complete path scores more than `GRAPH_BEAM` below the best path are dropped, and
the best-scoring arcs are kept while their words plus the final states stay within
`MAX_GRAPH_WORDS`. That bound keeps graphs usable by sil-machine 1.9.2's unmodified
`InteractiveTranslator`, which SIL's tools use: its error-correction search starts with one
hypothesis per arc word and final state in a `PriorityQueue(maxsize=1000)` and blocks for ever
on the 1,001st. States are renumbered in topological order (Thot's are
not), the initial state is 0, and every arc's alignment is local to its source range and its
target tokens.

**Prefix completion by graph search** (`complete_prefix`) answers a prefix-constrained
translation where sil-machine's error-correcting processor yields nothing (an empty graph): the
graph's paths matching the prefix's words, else the longest match continued by the best path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from serval.inference.v1 import node_pb2
from serval_common.core import TranslationSource
from serval_common.thot_smt import detokenizer

GRAPH_BEAM = 10.0
"""Arcs whose best path scores more than this (natural log) below the best path are pruned."""
MAX_GRAPH_WORDS = 900
"""At most this many arc words plus final states per word graph (see the module docstring)."""

_HUMAN = TranslationSource.HUMAN.value


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
    graph: node_pb2.WordGraph, prefix: list[str], last_complete: bool, n: int
) -> list[node_pb2.TranslationResult]:
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
    results: list[node_pb2.TranslationResult] = []
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
    graph: node_pb2.WordGraph, start: int, outgoing: dict[int, list[int]], finals: set[int]
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
    graph: node_pb2.WordGraph,
    arcs: list[node_pb2.WordGraphArc],
    prefix: list[str],
    matched: int,
    rest: list[node_pb2.WordGraphArc],
) -> node_pb2.TranslationResult:
    """A result from the arcs matching `prefix[:matched]`, the unmatched typed words, then `rest`."""
    tokens: list[str] = []
    confidences: list[float] = []
    sources: list[int] = []
    alignment: list[node_pb2.AlignedWordPair] = []
    phrases: list[node_pb2.Phrase] = []

    def add_arc(arc: node_pb2.WordGraphArc) -> None:
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
            node_pb2.AlignedWordPair(
                source_index=arc.source_segment_start + p.source_index, target_index=offset + p.target_index
            )
            for p in arc.alignment
        )
        phrases.append(
            node_pb2.Phrase(
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
        phrases.append(node_pb2.Phrase(target_segment_cut=len(tokens)))
    return node_pb2.TranslationResult(
        translation=detokenizer().detokenize(tokens),
        source_tokens=list(graph.source_tokens),
        target_tokens=tokens,
        confidences=confidences,
        sources=sources,
        alignment=alignment,
        phrases=phrases,
    )
