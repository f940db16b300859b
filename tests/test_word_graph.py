"""Word graphs and prefix-constrained translation with real CTranslate2 on the tiny model, and the
word graph driven through sil-machine's interactive translator (guarded: serval_cli/interactive.py)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import ctranslate2
import pytest
from machine.annotations import Range
from machine.tokenization import RangeTokenizer
from machine.tokenization.detokenizer import Detokenizer
from machine.translation import ErrorCorrectionModel

from inference_gpu.families.nmt.model import NmtModel
from inference_gpu.families.nmt.word_graph import piece_groups
from serval_cli.interactive import GuardedInteractiveTranslator, to_machine
from serval_common.core import TranslationSource, WordGraph, WordGraphArc
from serval_common.manifest import Manifest
from serval_common.nllb_tokenizer import detokenize, split_words, word_spans
from serval_common.settings import NodeSettings

SEGMENTS = [
    "In the beginning, God created.",
    "Abraham became the father of Isaac.",
    "Blessed are the peacemakers, for they shall be called children of God.",
    "“Jesus’ words,” he said  again.",
]
SETTINGS = NodeSettings(
    device="cpu", compute_type="int8", beam_size=4, max_decoding_length=24, max_input_tokens=64
)
SRC, TGT = "eng_Latn", "swh_Latn"


@pytest.fixture(scope="module")
def model(tiny_ct2_model: Path) -> Iterator[NmtModel]:
    loaded = NmtModel.load(tiny_ct2_model, Manifest(kind="base-model"), SETTINGS)
    yield loaded
    asyncio.run(loaded.close())


@pytest.fixture(scope="module")
def translator(tiny_ct2_model: Path) -> ctranslate2.Translator:
    return ctranslate2.Translator(str(tiny_ct2_model), device="cpu", compute_type="int8", intra_threads=1)


def paths(graph: WordGraph) -> list[list[WordGraphArc]]:
    """Every path from state 0 to a final state."""
    out: dict[int, list[WordGraphArc]] = {}
    for arc in graph.arcs:
        out.setdefault(arc.prev_state, []).append(arc)
    found: list[list[WordGraphArc]] = []

    def walk(state: int, path: list[WordGraphArc]) -> None:
        if state in graph.final_states:
            found.append(path)
        for arc in out.get(state, []):
            walk(arc.next_state, [*path, arc])

    walk(0, [])
    return found


def words_of(path: list[WordGraphArc]) -> list[str]:
    return [word for arc in path for word in arc.target_tokens]


def best_path(graph: WordGraph) -> list[WordGraphArc]:
    return max(paths(graph), key=lambda p: graph.initial_state_score + sum(arc.score for arc in p))


@pytest.mark.parametrize("segment", SEGMENTS)
def test_graph_structure(model: NmtModel, segment: str) -> None:
    graph = asyncio.run(model.word_graph(segment, SRC, TGT))
    assert list(graph.source_tokens) == split_words(segment)
    states = {0} | {arc.prev_state for arc in graph.arcs} | {arc.next_state for arc in graph.arcs}
    assert states == set(range(len(states)))
    reached = {0}
    for arc in graph.arcs:
        assert arc.prev_state in reached, "arcs must come in topological order"
        reached.add(arc.next_state)
        assert 0 <= arc.source_segment_start < arc.source_segment_end <= len(graph.source_tokens)
        assert len(arc.confidences) == len(arc.target_tokens) == len(arc.sources) >= 1
        assert all(0 < c <= 1 for c in arc.confidences)
        assert all(s == TranslationSource.PRIMARY for s in arc.sources)
        for pair in arc.alignment:
            assert 0 <= pair.source_index < arc.source_segment_end - arc.source_segment_start
            assert 0 <= pair.target_index < len(arc.target_tokens)
    assert set(graph.final_states) <= reached
    assert len(paths(graph)) == len(graph.final_states) > 1


@pytest.mark.parametrize("segment", SEGMENTS)
def test_best_path_reads_like_translate(model: NmtModel, segment: str) -> None:
    graph = asyncio.run(model.word_graph(segment, SRC, TGT))
    (result,) = asyncio.run(model.translate(segment, 1, SRC, TGT))
    best = words_of(best_path(graph))
    assert best == list(result.target_tokens)
    assert detokenize(best) == result.translation


@pytest.mark.parametrize("segment", SEGMENTS[:3])
def test_arc_scores_are_ctranslate2_log_probs(
    model: NmtModel, translator: ctranslate2.Translator, segment: str
) -> None:
    graph = asyncio.run(model.word_graph(segment, SRC, TGT))
    source, hypotheses = asyncio.run(model.hypotheses(segment, SETTINGS.beam_size, SRC, TGT))
    by_words = {}
    for hypothesis in reversed(hypotheses):
        by_words[tuple(model.tokenizer.decode(hypothesis.tokens).tokens)] = hypothesis
    for path in paths(graph):
        hypothesis = by_words[tuple(words_of(path))]
        (scored,) = translator.score_batch([source.tokens], [[TGT, *hypothesis.tokens]], max_input_length=0)
        log_probs = scored.log_probs[1:]
        groups = piece_groups(model.tokenizer.decode(hypothesis.tokens), len(hypothesis.tokens))
        assert [i for group in groups for i in group] == list(range(len(hypothesis.tokens)))
        raw = [sum(log_probs[i] for i in group) for group in groups]
        for arc, expected in zip(path[:-1], raw[:-1], strict=True):
            assert arc.score == pytest.approx(expected, abs=1e-3)
        # A hypothesis cut at the length limit has no `</s>`: CTranslate2 neither counts its step
        # nor adds its log-probability (which `score_batch` always appends).
        eos = log_probs[-1] if hypothesis.eos_log_prob is not None else 0.0
        steps = 1 + len(hypothesis.tokens) + (1 if hypothesis.eos_log_prob is not None else 0)
        normalized = (sum(log_probs[: len(hypothesis.tokens)]) + eos) / steps
        assert sum(arc.score for arc in path) == pytest.approx(normalized, abs=1e-3)
        assert sum(arc.score for arc in path) == pytest.approx(hypothesis.score, abs=1e-4)
        correction = hypothesis.score - sum(raw) - eos
        assert path[-1].score == pytest.approx(raw[-1] + eos + correction, abs=1e-3)


class WordTokenizer(RangeTokenizer[str, int, str]):
    def tokenize(self, data: str, data_range: Range[int] | None = None) -> Iterable[str]:
        return [data[r.start : r.end] for r in self.tokenize_as_ranges(data, data_range)]

    def tokenize_as_ranges(self, data: str, data_range: Range[int] | None = None) -> Iterable[Range[int]]:
        return [Range.create(start, end) for start, end in word_spans(data)]


class WordDetokenizer(Detokenizer[str, str]):
    def detokenize(self, tokens: Iterable[str]) -> str:
        return detokenize(list(tokens))


def interactive(segment: str, graph: WordGraph) -> GuardedInteractiveTranslator:
    return GuardedInteractiveTranslator(
        ErrorCorrectionModel(),
        None,
        WordTokenizer(),
        WordDetokenizer(),
        segment,
        to_machine(graph),
        True,
    )


def diverging_prefix(best: list[str], others: list[list[str]]) -> list[str]:
    """The words of another hypothesis up to and including its first word that differs from
    the best one, where that hypothesis goes on after it."""
    for other in others:
        for i, (a, b) in enumerate(zip(best, other, strict=False)):
            if a != b:
                if i + 1 < len(other):
                    return other[: i + 1]
                break
    pytest.skip("no hypothesis diverges from the best one and goes on")


@pytest.mark.parametrize("segment", SEGMENTS[:3])
def test_sil_machine_interactive_translator(model: NmtModel, segment: str) -> None:
    graph = asyncio.run(model.word_graph(segment, SRC, TGT))
    (result,) = asyncio.run(model.translate(segment, 1, SRC, TGT))
    translator = interactive(segment, graph)
    first = next(translator.get_current_results())
    assert list(first.target_tokens) == list(result.target_tokens)

    prefix_words = diverging_prefix(words_of(best_path(graph)), [words_of(p) for p in paths(graph)])
    translator.set_prefix(detokenize(prefix_words) + " ")
    suggestion = next(translator.get_current_results())
    assert list(suggestion.target_tokens)[: len(prefix_words)] == prefix_words
    assert len(suggestion.target_tokens) > len(prefix_words)
    assert list(suggestion.target_tokens) in [words_of(p) for p in paths(graph)]


def test_prefix_is_kept_and_completed(model: NmtModel, translator: ctranslate2.Translator) -> None:
    segment = SEGMENTS[1]
    prefix = "Ibrahimu aka"
    results = asyncio.run(model.translate(segment, 3, SRC, TGT, prefix=prefix))
    assert len(results) == 3
    typed = split_words(prefix)
    for result in results:
        assert result.translation.startswith(prefix)
        assert list(result.target_tokens)[: len(typed) - 1] == typed[:-1]
        assert len(result.confidences) == len(result.target_tokens)
    assert len({tuple(r.target_tokens) for r in results}) == 3

    source = model.tokenizer.encode(segment, SRC)
    (direct,) = translator.translate_batch(
        [source.tokens],
        target_prefix=[[TGT, *model.tokenizer.encode_target(prefix)]],
        beam_size=SETTINGS.beam_size,
        max_input_length=0,
        max_decoding_length=SETTINGS.max_decoding_length + 1 + len(model.tokenizer.encode_target(prefix)),
    )
    pieces = [p for p in direct.hypotheses[0] if p not in (TGT, "</s>")]
    assert results[0].translation == model.tokenizer.decode(pieces).translation


def test_prefix_results_start_with_complete_prefix_words(model: NmtModel) -> None:
    prefix = "Na mimi"
    (result,) = asyncio.run(model.translate(SEGMENTS[0], 1, SRC, TGT, prefix=prefix))
    assert result.translation.startswith(prefix)
    assert result.target_tokens[0] == "Na"
    assert not math.isnan(sum(result.confidences))
