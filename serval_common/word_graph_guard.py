"""sil-machine's error-correcting word-graph processor, guarded, and word graphs as sil-machine
holds them: what both the client (`serval_cli.interactive`) and the `smt-transfer` node backend
(`inference_gpu.families.smt.engine`, prefix-constrained translation) drive word graphs with.

sil-machine 1.9.2's `ErrorCorrectionWordGraphProcessor` (which `InteractiveTranslator` builds)
cannot be driven safely as it is: it gathers its hypotheses in a `queue.PriorityQueue(maxsize=1000)`
on the caller's own thread, so once a word graph yields more than 1,000 of them (one per word of
every arc, plus one per final state: an NLLB beam over a long verse does) `put` waits forever for a
consumer that is itself; and its search loop tests `queue.not_empty`, a `threading.Condition` that is
always true, so a caller that reads every result waits forever in `get` on the emptied queue.
`GuardedWordGraphProcessor` runs the library's own methods with an unbounded heap in place of that
queue (whose `not_empty` says whether anything is left) and caps how many results one search
yields. Use it rather than sil-machine's class.

Needs sil-machine alone (the `api` or the `smt` extra), not httpx: nothing imports this module
unless it drives word graphs through sil-machine, so it is loaded only where sil-machine is.
"""

from __future__ import annotations

import heapq
import types
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from machine.annotations import Range
from machine.tokenization.detokenizer import Detokenizer
from machine.translation import (
    ErrorCorrectionModel,
    TranslationResult,
    TranslationSources,
    WordAlignmentMatrix,
    WordGraph,
    WordGraphArc,
)
from machine.translation import error_correction_word_graph_processor as _processor_module
from machine.translation.error_correction_word_graph_processor import ErrorCorrectionWordGraphProcessor

from serval_common import families
from serval_common.core import TranslationSource
from serval_common.core import WordGraph as CoreGraph

MAX_RESULTS = 1000
"""The most results one search of a guarded processor yields (the library meant 1,000 too)."""

_SOURCE_NAMES = (
    (TranslationSource.PRIMARY, "Primary"),
    (TranslationSource.SECONDARY, "Secondary"),
    (TranslationSource.HUMAN, "Human"),
)


def _names(source: TranslationSource) -> list[str]:
    return [name for flag, name in _SOURCE_NAMES if flag in source]


def machine_sources(names: Sequence[str], primary: TranslationSources) -> TranslationSources:
    """Serval's per-word sources as sil-machine's flags, as Serval maps them: Primary is the engine's
    own model (`primary`: NMT or SMT), Secondary the transfer engine, Human a trained segment."""
    flags = TranslationSources.NONE
    for name in names:
        flags |= {"Secondary": TranslationSources.TRANSFER, "Human": TranslationSources.PREFIX}.get(
            name, primary
        )
    return flags


def primary_source(engine_type: str) -> TranslationSources:
    """The sil-machine flag of an engine type's own model; `engine_type` as Serval's REST names it
    (`smt-transfer`) or as its C# enum does (`SmtTransfer`). An unknown type reads as NMT."""
    family = families.of_spelling(engine_type)
    return TranslationSources.NMT if family is None else TranslationSources[family.machine_source]


def to_machine(
    graph: CoreGraph | Mapping[str, Any], primary: TranslationSources = TranslationSources.NMT
) -> WordGraph:
    """sil-machine's `WordGraph` of a word graph of the core model (`serval_common.core`) or as
    REST answers it (its JSON, camelCase)."""
    if isinstance(graph, CoreGraph):
        arcs = [
            _arc(
                arc.prev_state,
                arc.next_state,
                arc.score,
                list(arc.target_tokens),
                list(arc.confidences),
                arc.source_segment_start,
                arc.source_segment_end,
                [(a.source_index, a.target_index) for a in arc.alignment],
                [_names(source) for source in arc.sources],
                primary,
            )
            for arc in graph.arcs
        ]
        return WordGraph(list(graph.source_tokens), arcs, list(graph.final_states), graph.initial_state_score)
    arcs = [
        _arc(
            arc["prevState"],
            arc["nextState"],
            arc["score"],
            list(arc["targetTokens"]),
            list(arc["confidences"]),
            arc["sourceSegmentStart"],
            arc["sourceSegmentEnd"],
            [(a["sourceIndex"], a["targetIndex"]) for a in arc.get("alignment", [])],
            arc.get("sources") or [[] for _ in arc["targetTokens"]],
            primary,
        )
        for arc in graph["arcs"]
    ]
    return WordGraph(
        list(graph["sourceTokens"]), arcs, list(graph["finalStates"]), graph.get("initialStateScore", 0.0)
    )


def _arc(
    prev_state: int,
    next_state: int,
    score: float,
    target_tokens: list[str],
    confidences: list[float],
    source_start: int,
    source_end: int,
    alignment: list[tuple[int, int]],
    sources: list[list[str]],
    primary: TranslationSources,
) -> WordGraphArc:
    return WordGraphArc(
        prev_state,
        next_state,
        score,
        target_tokens,
        WordAlignmentMatrix.from_word_pairs(source_end - source_start, len(target_tokens), set(alignment)),
        Range.create(source_start, source_end),
        [machine_sources(names or ["Primary"], primary) for names in sources],
        confidences,
    )


class HypothesisQueue:
    """What `ErrorCorrectionWordGraphProcessor` needs of its queue, unbounded and on one thread:
    `put`, `get` (best first: hypotheses order themselves) and `not_empty`, true while something is
    left. It pops in exactly the order `queue.PriorityQueue` does (both are `heapq` heaps)."""

    def __init__(self, maxsize: int = 0) -> None:
        """`maxsize` is accepted and ignored: a bound is what made the library's queue block."""
        self._heap: list[Any] = []

    @property
    def not_empty(self) -> bool:
        return bool(self._heap)

    def put(self, item: Any) -> None:
        heapq.heappush(self._heap, item)

    def get(self) -> Any:
        return heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._heap)


def _with_hypothesis_queue(function: Any) -> Any:
    """The library's own function, run with `HypothesisQueue` wherever it names `PriorityQueue`
    (its module's global, resolved when the function runs): its code is reused, not copied, and
    the library's module is left as it is for everyone else."""
    namespace = dict(function.__globals__)
    namespace["PriorityQueue"] = HypothesisQueue
    return types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )


if "PriorityQueue" not in ErrorCorrectionWordGraphProcessor._get_hypotheses.__code__.co_names:
    raise ImportError(
        f"sil-machine's ErrorCorrectionWordGraphProcessor ({_processor_module.__file__}) no longer builds "
        "its hypothesis queue as this guard expects: check whether the bounded queue is gone and adapt "
        "serval_common/word_graph_guard.py"
    )


class GuardedWordGraphProcessor(ErrorCorrectionWordGraphProcessor):
    """`ErrorCorrectionWordGraphProcessor` with an unbounded hypothesis queue that empties, and at
    most `max_results` results per search, so it neither blocks on a large word graph nor waits on
    an empty queue, and a caller that reads every result stops."""

    def __init__(
        self,
        ecm: ErrorCorrectionModel,
        target_detokenizer: Detokenizer[str, str],
        word_graph: WordGraph,
        ecm_weight: float = 1,
        word_graph_weight: float = 1,
        max_results: int = MAX_RESULTS,
    ) -> None:
        super().__init__(ecm, target_detokenizer, word_graph, ecm_weight, word_graph_weight)
        self.max_results = max_results

    _get_hypotheses = _with_hypothesis_queue(ErrorCorrectionWordGraphProcessor._get_hypotheses)

    def get_results(self) -> Generator[TranslationResult, None, None]:
        for count, result in enumerate(super().get_results(), 1):
            yield result
            if count >= self.max_results:
                return
