"""The core's own translation model: checked on construction, carried unchanged across the
node protocol's edge (`serval_common.node_codec`), and given to Serval's gRPC clients with every
source of each word (`serval_api.grpc.results`)."""

from __future__ import annotations

import pytest

from serval.translation.v1 import engine_pb2
from serval_api.grpc import results as grpc_results
from serval_common.core import (
    AlignedWordPair,
    InvalidResult,
    Phrase,
    TranslationResult,
    TranslationSource,
    WordAlignmentResult,
    WordGraph,
    WordGraphArc,
)
from serval_common.node_codec import (
    alignment_from_wire,
    alignment_to_wire,
    graph_from_wire,
    graph_to_wire,
    result_from_wire,
    result_to_wire,
)

SOURCE = ("In", "the", "beginning")
TARGET = ("Hapo", "mwanzo")


def result(**changes: object) -> TranslationResult:
    fields: dict[str, object] = {
        "translation": "Hapo mwanzo",
        "source_tokens": SOURCE,
        "target_tokens": TARGET,
        "confidences": (0.5, 0.25),
        "sources": (TranslationSource.PRIMARY, TranslationSource.HUMAN | TranslationSource.SECONDARY),
        "alignment": (AlignedWordPair(2, 0), AlignedWordPair(2, 1)),
        "phrases": (Phrase(0, 3, 2),),
    }
    fields.update(changes)
    return TranslationResult(**fields)  # type: ignore[arg-type]


def arc(**changes: object) -> WordGraphArc:
    fields: dict[str, object] = {
        "prev_state": 0,
        "next_state": 1,
        "score": -0.5,
        "target_tokens": ("Hapo",),
        "confidences": (0.6,),
        "source_segment_start": 1,
        "source_segment_end": 3,
        "alignment": (AlignedWordPair(1, 0),),
        "sources": (TranslationSource.PRIMARY,),
    }
    fields.update(changes)
    return WordGraphArc(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"confidences": (0.5,)},
        {"sources": (TranslationSource.PRIMARY,) * 3},
        {"confidences": (0.5, float("inf"))},
        {"confidences": (0.5, float("nan"))},
        {"alignment": (AlignedWordPair(3, 0),)},
        {"alignment": (AlignedWordPair(0, 2),)},
        {"phrases": (Phrase(0, 4, 2),)},
        {"phrases": (Phrase(0, 1, 2), Phrase(1, 3, 1))},
        {"phrases": (Phrase(0, 3, 3),)},
    ],
    ids=repr,
)
def test_a_result_whose_parts_do_not_fit_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidResult):
        result(**changes)


def test_results_are_immutable_and_a_text_only_result_has_no_confidences_or_alignment() -> None:
    text = result(confidences=(), alignment=())
    assert text.confidences == () and text.target_tokens == TARGET
    with pytest.raises(AttributeError):
        text.translation = "x"  # type: ignore[misc]
    with pytest.raises(InvalidResult):
        AlignedWordPair(-1, 0)
    with pytest.raises(InvalidResult):
        Phrase(2, 1, 0)


@pytest.mark.parametrize(
    "changes",
    [
        {"confidences": ()},
        {"sources": ()},
        {"source_segment_start": 2, "source_segment_end": 1},
        {"alignment": (AlignedWordPair(2, 0),)},
        {"prev_state": -1},
    ],
    ids=repr,
)
def test_an_arc_whose_parts_do_not_fit_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidResult):
        arc(**changes)


def test_a_graph_refuses_arcs_past_its_source() -> None:
    with pytest.raises(InvalidResult):
        WordGraph(("In",), 0.0, (1,), (arc(),))


def test_the_node_protocol_carries_every_field_unchanged() -> None:
    full = result()
    assert result_from_wire(result_to_wire(full)) == full
    graph = WordGraph(
        SOURCE, -1.25, (1, 2), (arc(), arc(prev_state=1, next_state=2, sources=(TranslationSource.NONE,)))
    )
    assert graph_from_wire(graph_to_wire(graph)) == graph
    scored = WordAlignmentResult(SOURCE, TARGET, (AlignedWordPair(2, 1, 0.75), AlignedWordPair(0, 0)))
    back = alignment_from_wire(alignment_to_wire(scored))
    assert back == scored and back.alignment[1].score is None


@pytest.mark.parametrize("bits", range(8))
def test_serval_grpc_gives_each_word_every_source_it_came_from(bits: int) -> None:
    source = TranslationSource(bits)
    wire = grpc_results.translation_result(result(sources=(source, TranslationSource.PRIMARY)))
    expected = [
        value
        for flag, value in (
            (TranslationSource.PRIMARY, engine_pb2.TRANSLATION_SOURCE_PRIMARY),
            (TranslationSource.SECONDARY, engine_pb2.TRANSLATION_SOURCE_SECONDARY),
            (TranslationSource.HUMAN, engine_pb2.TRANSLATION_SOURCE_HUMAN),
        )
        if bits & flag.value
    ]
    assert [list(s.values) for s in wire.sources] == [expected, [engine_pb2.TRANSLATION_SOURCE_PRIMARY]]
    assert result_from_wire(result_to_wire(result(sources=(source, source)))).sources == (source, source)
