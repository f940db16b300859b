"""Serval gRPC's edge: the core's results (`serval_common.core`) as `serval.translation.v1` and
`serval.word_alignment.v1` messages."""

from __future__ import annotations

from collections.abc import Iterable

from serval.translation.v1 import common_pb2, engine_pb2
from serval.word_alignment.v1 import common_pb2 as alignment_common_pb2
from serval.word_alignment.v1 import engine_pb2 as alignment_pb2
from serval_common import core

_SOURCES = (
    (core.TranslationSource.PRIMARY, engine_pb2.TRANSLATION_SOURCE_PRIMARY),
    (core.TranslationSource.SECONDARY, engine_pb2.TRANSLATION_SOURCE_SECONDARY),
    (core.TranslationSource.HUMAN, engine_pb2.TRANSLATION_SOURCE_HUMAN),
)


_SOURCE_VALUES = {
    source: [value for flag, value in _SOURCES if flag in source]
    for source in (core.TranslationSource(bits) for bits in range(1 << len(_SOURCES)))
}
"""Every combination of sources, as the wire's values: a result has one per target word, and a
`Flag`'s `in` is slow enough to show in the API service's CPU per request."""


def _sources(source: core.TranslationSource) -> engine_pb2.TranslationSources:
    return engine_pb2.TranslationSources(values=_SOURCE_VALUES[source])


def _pairs(alignment: Iterable[core.AlignedWordPair]) -> list[common_pb2.AlignedWordPair]:
    return [
        common_pb2.AlignedWordPair(source_index=p.source_index, target_index=p.target_index)
        for p in alignment
    ]


def translation_result(result: core.TranslationResult) -> engine_pb2.TranslationResult:
    return engine_pb2.TranslationResult(
        translation=result.translation,
        source_tokens=result.source_tokens,
        target_tokens=result.target_tokens,
        confidences=result.confidences,
        sources=[_sources(source) for source in result.sources],
        alignment=_pairs(result.alignment),
        phrases=[
            engine_pb2.Phrase(
                source_segment_start=p.source_segment_start,
                source_segment_end=p.source_segment_end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in result.phrases
        ],
    )


def translation_results(results: list[core.TranslationResult]) -> list[engine_pb2.TranslationResult]:
    return [translation_result(result) for result in results]


def word_graph(graph: core.WordGraph) -> engine_pb2.WordGraph:
    return engine_pb2.WordGraph(
        source_tokens=graph.source_tokens,
        initial_state_score=graph.initial_state_score,
        final_states=graph.final_states,
        arcs=[
            engine_pb2.WordGraphArc(
                prev_state=arc.prev_state,
                next_state=arc.next_state,
                score=arc.score,
                target_tokens=arc.target_tokens,
                confidences=arc.confidences,
                source_segment_start=arc.source_segment_start,
                source_segment_end=arc.source_segment_end,
                alignment=_pairs(arc.alignment),
                sources=[_sources(source) for source in arc.sources],
            )
            for arc in graph.arcs
        ],
    )


def word_alignment(result: core.WordAlignmentResult) -> alignment_pb2.WordAlignmentResult:
    return alignment_pb2.WordAlignmentResult(
        source_tokens=result.source_tokens,
        target_tokens=result.target_tokens,
        alignment=[
            alignment_common_pb2.AlignedWordPair(
                source_index=p.source_index, target_index=p.target_index, score=p.score or 0.0
            )
            for p in result.alignment
        ],
    )
