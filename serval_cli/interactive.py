"""Interactive translation on the client with SIL's `sil-machine`, against this service's engines.

An engine's word graph (`POST …/get-word-graph` over REST, `GetWordGraph` over gRPC) becomes
sil-machine's `WordGraph` (`to_machine`), and `ServalInteractiveEngine` is an
`InteractiveTranslationEngine` that asks the service for it, so sil-machine's interactive
translator completes the translator's typing on the client with no call per keystroke.

`GuardedInteractiveTranslator` is sil-machine's `InteractiveTranslator` on the guarded
error-correcting processor of `serval_common.word_graph_guard` (sil-machine 1.9.2's own one hangs on
word graphs with more than 1,000 hypotheses): use it (or `ServalInteractiveEngine.create_translator`)
rather than sil-machine's class.

Needs the `api` extra (sil-machine and httpx): `pip install -e '.[api]'`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
)

if TYPE_CHECKING:
    import httpx

from serval_common.word_graph_guard import (
    MAX_RESULTS,
    GuardedWordGraphProcessor,
    machine_sources,
    primary_source,
    to_machine,
)

__all__ = [
    "MAX_RESULTS",
    "GuardedInteractiveTranslator",
    "GuardedWordGraphProcessor",
    "ServalInteractiveEngine",
    "machine_sources",
    "primary_source",
    "result_from_json",
    "to_machine",
]


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
        import httpx  # the `api` extra's; the node image ships serval_cli without it

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
