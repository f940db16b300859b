"""Interactive translation on the client with SIL's `sil-machine`, against this service's engines.

An engine's word graph (`POST …/get-word-graph` over REST, `GetWordGraph` over gRPC) becomes
sil-machine's `WordGraph` (`to_machine`), and `ServalInteractiveEngine` is an
`InteractiveTranslationEngine` that asks the service for it, so sil-machine's interactive
translator completes the translator's typing on the client with no call per keystroke.

sil-machine 1.9.2's `ErrorCorrectionWordGraphProcessor` (which `InteractiveTranslator` builds)
cannot be driven safely as it is: it gathers its hypotheses in a `queue.PriorityQueue(maxsize=1000)`
on the caller's own thread, so once a word graph yields more than 1,000 of them (one per word of
every arc, plus one per final state: an NLLB beam over a long verse does) `put` waits forever for a
consumer that is itself; and its search loop tests `queue.not_empty`, a `threading.Condition` that is
always true, so a caller that reads every result waits forever in `get` on the emptied queue.
`GuardedWordGraphProcessor` runs the library's own methods with an unbounded heap in place of that
queue (whose `not_empty` says whether anything is left) and caps how many results one search
yields; `GuardedInteractiveTranslator` is `InteractiveTranslator` with that processor. Use them (or
`ServalInteractiveEngine.create_translator`) rather than sil-machine's classes.

Needs the `api` extra (sil-machine and httpx): `pip install -e '.[api]'`.
"""

from __future__ import annotations

import heapq
import statistics
import time
import types
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import httpx
from machine.annotations import Range
from machine.tokenization import LatinWordDetokenizer, LatinWordTokenizer
from machine.tokenization.detokenizer import Detokenizer
from machine.tokenization.range_tokenizer import RangeTokenizer
from machine.translation import (
    ErrorCorrectionModel,
    InteractiveTranslationEngine,
    InteractiveTranslator,
    Phrase,
    TranslationResult,
    TranslationSources,
    WordAlignmentMatrix,
    WordGraph,
    WordGraphArc,
)
from machine.translation import error_correction_word_graph_processor as _processor_module
from machine.translation.error_correction_word_graph_processor import ErrorCorrectionWordGraphProcessor

from serval.translation.v1 import engine_pb2

MAX_RESULTS = 1000
"""The most results one search of a guarded processor yields (the library meant 1,000 too)."""

_PROTO_SOURCES = {
    engine_pb2.TRANSLATION_SOURCE_SECONDARY: "Secondary",
    engine_pb2.TRANSLATION_SOURCE_HUMAN: "Human",
}


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
    """The sil-machine flag of an engine type's own model."""
    return (
        TranslationSources.SMT
        if engine_type.lower() in ("smt-transfer", "smttransfer")
        else TranslationSources.NMT
    )


def to_machine(
    graph: engine_pb2.WordGraph | Mapping[str, Any], primary: TranslationSources = TranslationSources.NMT
) -> WordGraph:
    """sil-machine's `WordGraph` of a word graph as gRPC (`serval.translation.v1.WordGraph`) or REST
    (its JSON, camelCase) answers it."""
    if isinstance(graph, engine_pb2.WordGraph):
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
                [[_PROTO_SOURCES.get(v, "Primary") for v in s.values] for s in arc.sources],
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


def result_from_json(result: Mapping[str, Any], primary: TranslationSources) -> TranslationResult:
    """sil-machine's `TranslationResult` of a REST `TranslationResult`. Serval sends no sequence
    confidence: it is the mean of the word confidences here."""
    source, target = list(result["sourceTokens"]), list(result["targetTokens"])
    confidences = list(result["confidences"])
    alignment = WordAlignmentMatrix.from_word_pairs(
        len(source), len(target), {(a["sourceIndex"], a["targetIndex"]) for a in result.get("alignment", [])}
    )
    phrases = [
        Phrase(Range.create(p["sourceSegmentStart"], p["sourceSegmentEnd"]), p["targetSegmentCut"])
        for p in result.get("phrases", [])
    ]
    return TranslationResult(
        result["translation"],
        source,
        target,
        confidences,
        statistics.fmean(confidences) if confidences else 0.0,
        [
            machine_sources(names or ["Primary"], primary)
            for names in result.get("sources", [[] for _ in target])
        ],
        alignment,
        phrases,
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
        "serval_cli/interactive.py"
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


class GuardedInteractiveTranslator(InteractiveTranslator):
    """sil-machine's `InteractiveTranslator` on a `GuardedWordGraphProcessor`."""

    def __init__(
        self,
        ecm: ErrorCorrectionModel,
        engine: InteractiveTranslationEngine | None,
        target_tokenizer: RangeTokenizer[str, int, str],
        target_detokenizer: Detokenizer[str, str],
        segment: str,
        word_graph: WordGraph,
        sentence_start: bool = True,
        max_results: int = MAX_RESULTS,
    ) -> None:
        # The base class builds its (unguarded) processor on an empty graph of the same source
        # words, which costs nothing; the guarded one on the real graph replaces it.
        super().__init__(
            ecm,
            engine,  # type: ignore[arg-type]
            target_tokenizer,
            target_detokenizer,
            segment,
            WordGraph(word_graph.source_tokens),
            sentence_start,
        )
        self._word_graph_processor = GuardedWordGraphProcessor(
            ecm, target_detokenizer, word_graph, max_results=max_results
        )
        self._correct()


class ServalInteractiveEngine(InteractiveTranslationEngine):
    """One engine of this service over REST as sil-machine's `InteractiveTranslationEngine`.

    Every call's latency is kept in `latencies` (seconds, by operation: `translate`, `translate_n`,
    `translate_prefix`, `word_graph`, `train_segment`)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        engine_id: str,
        *,
        engine_type: str | None = None,
        timeout_s: float = 120,
        client: httpx.Client | None = None,
    ) -> None:
        self.engine_id = engine_id
        self._client = client or httpx.Client(
            base_url=f"{base_url.rstrip('/')}/api/v1/translation/engines/",
            headers={"X-API-Key": api_key},
            timeout=timeout_s,
        )
        self._owns_client = client is None
        self._engine_type = engine_type
        self.target_tokenizer: RangeTokenizer[str, int, str] = LatinWordTokenizer()
        self.target_detokenizer: Detokenizer[str, str] = LatinWordDetokenizer()
        self.ecm = ErrorCorrectionModel()
        self.latencies: dict[str, list[float]] = {}

    def __enter__(self) -> ServalInteractiveEngine:
        return self

    @property
    def engine_type(self) -> str:
        if self._engine_type is None:
            self._engine_type = str(self._call("GET", "", "engine")["type"])
        return self._engine_type

    @property
    def primary(self) -> TranslationSources:
        return primary_source(self.engine_type)

    def _call(self, method: str, path: str, operation: str, body: Any = None) -> Any:
        """`method` on the engine's `path` (relative to `…/translation/engines/{id}`), timed."""
        url = f"{self.engine_id}{path}"
        started = time.perf_counter()
        response = self._client.request(method, url, json=body) if body is not None else self._client.get(url)
        self.latencies.setdefault(operation, []).append(time.perf_counter() - started)
        response.raise_for_status()
        return response.json() if response.content else None

    def get_word_graph(self, segment: str | Sequence[str]) -> WordGraph:
        graph = self._call("POST", "/get-word-graph", "word_graph", _text(segment))
        return to_machine(graph, self.primary)

    def translate(self, segment: str | Sequence[str]) -> TranslationResult:
        return result_from_json(self._call("POST", "/translate", "translate", _text(segment)), self.primary)

    def translate_n(self, n: int, segment: str | Sequence[str]) -> Sequence[TranslationResult]:
        results = self._call("POST", f"/translate/{n}", "translate_n", _text(segment))
        return [result_from_json(r, self.primary) for r in results]

    def translate_batch(self, segments: Sequence[str | Sequence[str]]) -> Sequence[TranslationResult]:
        return [self.translate(segment) for segment in segments]

    def translate_n_batch(
        self, n: int, segments: Sequence[str | Sequence[str]]
    ) -> Sequence[Sequence[TranslationResult]]:
        return [self.translate_n(n, segment) for segment in segments]

    def translate_prefix_json(self, segment: str, prefix: str, n: int = 1) -> list[dict[str, Any]]:
        """This service's `translate-prefix` (not in Serval's API): `n` translations starting with
        `prefix`, as REST answers them."""
        body = {"segment": segment, "prefix": prefix, "n": n}
        return list(self._call("POST", "/translate-prefix", "translate_prefix", body))

    def train_segment(
        self,
        source_segment: str | Sequence[str],
        target_segment: str | Sequence[str],
        sentence_start: bool = True,
    ) -> None:
        body = {
            "sourceSegment": _text(source_segment),
            "targetSegment": _text(target_segment),
            "sentenceStart": sentence_start,
        }
        self._call("POST", "/train-segment", "train_segment", body)

    def create_translator(
        self, segment: str, sentence_start: bool = True, word_graph: WordGraph | None = None
    ) -> GuardedInteractiveTranslator:
        """A guarded interactive translator for `segment` on the engine's word graph (fetched unless
        given), approving into this engine's `train-segment`."""
        return GuardedInteractiveTranslator(
            self.ecm,
            self,
            self.target_tokenizer,
            self.target_detokenizer,
            segment,
            word_graph if word_graph is not None else self.get_word_graph(segment),
            sentence_start,
        )

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def _text(segment: str | Sequence[str]) -> str:
    return segment if isinstance(segment, str) else " ".join(segment)
