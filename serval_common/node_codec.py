"""The node protocol's edge: the core model (`serval_common.core`) to and from the messages of
`serval.inference.v1` that carry results between an inference node and the API service. Both ends
use this one module, so the two never disagree on a field."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from serval.inference.v1 import node_pb2
from serval_common.core import (
    AlignedWordPair,
    Detail,
    Phrase,
    Sender,
    TranslationResult,
    TranslationSource,
    WordAlignmentResult,
    WordGraph,
    WordGraphArc,
    WorkClass,
)

DETAIL_TO_WIRE = {Detail.FULL: node_pb2.RESULT_DETAIL_FULL, Detail.TEXT: node_pb2.RESULT_DETAIL_TEXT}
DETAIL_FROM_WIRE = {wire: detail for detail, wire in DETAIL_TO_WIRE.items()}


def detail_of(op: node_pb2.TranslateOp) -> Detail:
    return DETAIL_FROM_WIRE.get(op.detail, Detail.FULL)


CLASS_TO_WIRE = {
    WorkClass.INTERACTIVE: node_pb2.WORK_CLASS_INTERACTIVE,
    WorkClass.BULK: node_pb2.WORK_CLASS_BULK,
}
CLASS_FROM_WIRE = {wire: work_class for work_class, wire in CLASS_TO_WIRE.items()}


def sender_of(item: node_pb2.WorkItem) -> Sender:
    """Who sent the work item (an earlier API service's: no owner, interactive); a class this
    release does not know is taken as interactive."""
    return Sender(item.owner, item.key_id, CLASS_FROM_WIRE.get(item.work_class, WorkClass.INTERACTIVE))


def _pairs(alignment: Iterable[AlignedWordPair]) -> list[node_pb2.AlignedWordPair]:
    return [
        node_pb2.AlignedWordPair(source_index=p.source_index, target_index=p.target_index, score=p.score)
        if p.score is not None
        else node_pb2.AlignedWordPair(source_index=p.source_index, target_index=p.target_index)
        for p in alignment
    ]


def _pairs_from(pairs: Sequence[node_pb2.AlignedWordPair]) -> tuple[AlignedWordPair, ...]:
    return tuple(
        AlignedWordPair(p.source_index, p.target_index, p.score if p.HasField("score") else None)
        for p in pairs
    )


_SOURCE_OF = {source.value: source for source in map(TranslationSource, range(1 << len(TranslationSource)))}
"""Every combination of sources by its value: calling a `Flag` for each target word of each
result is slow enough to show in the API service's CPU per request."""


def _sources_from(values: Sequence[int]) -> tuple[TranslationSource, ...]:
    return tuple(_SOURCE_OF[value] if value in _SOURCE_OF else TranslationSource(value) for value in values)


def result_to_wire(result: TranslationResult) -> node_pb2.TranslationResult:
    return node_pb2.TranslationResult(
        translation=result.translation,
        source_tokens=result.source_tokens,
        target_tokens=result.target_tokens,
        confidences=result.confidences,
        sources=[source.value for source in result.sources],
        alignment=_pairs(result.alignment),
        phrases=[
            node_pb2.Phrase(
                source_segment_start=p.source_segment_start,
                source_segment_end=p.source_segment_end,
                target_segment_cut=p.target_segment_cut,
            )
            for p in result.phrases
        ],
    )


def result_from_wire(message: node_pb2.TranslationResult) -> TranslationResult:
    return TranslationResult(
        translation=message.translation,
        source_tokens=tuple(message.source_tokens),
        target_tokens=tuple(message.target_tokens),
        confidences=tuple(message.confidences),
        sources=_sources_from(message.sources),
        alignment=_pairs_from(message.alignment),
        phrases=tuple(
            Phrase(p.source_segment_start, p.source_segment_end, p.target_segment_cut)
            for p in message.phrases
        ),
    )


def graph_to_wire(graph: WordGraph) -> node_pb2.WordGraph:
    return node_pb2.WordGraph(
        source_tokens=graph.source_tokens,
        initial_state_score=graph.initial_state_score,
        final_states=graph.final_states,
        arcs=[
            node_pb2.WordGraphArc(
                prev_state=arc.prev_state,
                next_state=arc.next_state,
                score=arc.score,
                target_tokens=arc.target_tokens,
                confidences=arc.confidences,
                source_segment_start=arc.source_segment_start,
                source_segment_end=arc.source_segment_end,
                alignment=_pairs(arc.alignment),
                sources=[source.value for source in arc.sources],
            )
            for arc in graph.arcs
        ],
    )


def graph_from_wire(message: node_pb2.WordGraph) -> WordGraph:
    return WordGraph(
        source_tokens=tuple(message.source_tokens),
        initial_state_score=message.initial_state_score,
        final_states=tuple(message.final_states),
        arcs=tuple(
            WordGraphArc(
                prev_state=arc.prev_state,
                next_state=arc.next_state,
                score=arc.score,
                target_tokens=tuple(arc.target_tokens),
                confidences=tuple(arc.confidences),
                source_segment_start=arc.source_segment_start,
                source_segment_end=arc.source_segment_end,
                alignment=_pairs_from(arc.alignment),
                sources=_sources_from(arc.sources),
            )
            for arc in message.arcs
        ),
    )


def alignment_to_wire(result: WordAlignmentResult) -> node_pb2.WordAlignmentResult:
    return node_pb2.WordAlignmentResult(
        source_tokens=result.source_tokens,
        target_tokens=result.target_tokens,
        alignment=_pairs(result.alignment),
    )


def alignment_from_wire(message: node_pb2.WordAlignmentResult) -> WordAlignmentResult:
    return WordAlignmentResult(
        source_tokens=tuple(message.source_tokens),
        target_tokens=tuple(message.target_tokens),
        alignment=_pairs_from(message.alignment),
    )
