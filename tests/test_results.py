from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import ctranslate2
import numpy as np
import pytest

from inference_gpu.families.base import InputTooLong
from inference_gpu.families.nmt.backends.ctranslate2 import to_hypothesis
from inference_gpu.families.nmt.model import NmtModel
from inference_gpu.families.nmt.results import build_result, word_alignment
from serval_common.core import Detail, TranslationResult, TranslationSource
from serval_common.manifest import Manifest
from serval_common.nllb_tokenizer import DecodedTarget, EncodedSource, normalize_punctuation, split_words
from serval_common.settings import NodeSettings

SEGMENTS = [
    "In the beginning, God created.",
    "“Jesus’ words,” he said  again.",
    "Abraham became the father of Isaac.",
]
SETTINGS = NodeSettings(
    device="cpu", compute_type="int8", beam_size=4, max_decoding_length=24, max_input_tokens=64
)


@pytest.fixture(scope="module")
def model(tiny_ct2_model: Path) -> Iterator[NmtModel]:
    loaded = NmtModel.load(tiny_ct2_model, Manifest(kind="base-model"), SETTINGS)
    yield loaded
    asyncio.run(loaded.close())


@pytest.fixture(scope="module")
def translator(tiny_ct2_model: Path) -> ctranslate2.Translator:
    return ctranslate2.Translator(str(tiny_ct2_model), device="cpu", compute_type="int8", intra_threads=1)


def _check(result: TranslationResult, segment: str) -> None:
    words, targets = list(result.source_tokens), list(result.target_tokens)
    assert words == split_words(segment)
    assert split_words(result.translation) == targets
    assert len(result.confidences) == len(targets) == len(result.sources)
    assert all(0 < c <= 1 for c in result.confidences)
    assert all(s == TranslationSource.PRIMARY for s in result.sources)
    assert [a.target_index for a in result.alignment] == list(range(len(targets)))
    assert all(0 <= a.source_index < len(words) for a in result.alignment)
    (phrase,) = result.phrases
    assert (phrase.source_segment_start, phrase.source_segment_end) == (0, len(words))
    assert phrase.target_segment_cut == len(targets)


@pytest.mark.parametrize("segment", SEGMENTS)
def test_translate_gives_the_hypothesis_of_ctranslate2(
    model: NmtModel, translator: ctranslate2.Translator, segment: str
) -> None:
    (result,) = asyncio.run(model.translate(segment, 1, "eng_Latn", "swh_Latn"))
    source = model.tokenizer.encode(segment, "eng_Latn")
    (direct,) = translator.translate_batch(
        [source.tokens],
        target_prefix=[["swh_Latn"]],
        beam_size=SETTINGS.beam_size,
        max_decoding_length=SETTINGS.max_decoding_length + 1,
    )
    pieces = direct.hypotheses[0]
    assert pieces[0] == "swh_Latn"
    _, (hypothesis,) = asyncio.run(model.hypotheses(segment, 1, "eng_Latn", "swh_Latn"))
    assert hypothesis.tokens == pieces[1:]
    assert list(result.target_tokens) == model.tokenizer.decode(pieces[1:]).tokens
    assert hypothesis.attention.shape == (len(hypothesis.tokens), len(source.tokens))
    _check(result, segment)


def test_score_is_the_length_normalized_sum_of_token_log_probs(model: NmtModel) -> None:
    _, hypotheses = asyncio.run(model.hypotheses(SEGMENTS[0], 4, "eng_Latn", "swh_Latn"))
    for h in hypotheses:
        steps = 1 + len(h.tokens) + (h.eos_log_prob is not None)
        total = sum(h.log_probs) + (h.eos_log_prob or 0.0)
        assert h.score == pytest.approx(total / steps, abs=1e-3)


def test_n_best_results_are_distinct_and_ordered_by_score(model: NmtModel) -> None:
    segment = SEGMENTS[1]
    results = asyncio.run(model.translate(segment, 2, "eng_Latn", "swh_Latn"))
    assert len(results) == 2
    assert results[0].target_tokens != results[1].target_tokens
    _, hypotheses = asyncio.run(model.hypotheses(segment, 2, "eng_Latn", "swh_Latn"))
    scores = [h.score for h in hypotheses]
    assert scores == sorted(scores, reverse=True)
    best_first = [model.tokenizer.decode(h.tokens).tokens for h in hypotheses]
    assert best_first.index(list(results[0].target_tokens)) < best_first.index(list(results[1].target_tokens))
    for result in results:
        _check(result, segment)


def test_result_of_a_forced_real_translation(model: NmtModel, translator: ctranslate2.Translator) -> None:
    """A real target sentence forced as the prefix gives real attention and log-probs to check
    the word-level confidences and alignment on."""
    segment = "Jesus said to them, “Come and see.”"
    target_text = "Yesu akawaambia: Njooni mwone (sasa)."
    sp = model.tokenizer
    source = sp.encode(segment, "eng_Latn")
    target_pieces = sp.encode(normalize_punctuation(target_text), "swh_Latn").pieces
    prefix = ["swh_Latn", *target_pieces]
    (forced,) = translator.translate_batch(
        [source.tokens],
        target_prefix=[prefix],
        beam_size=1,
        return_scores=True,
        return_attention=True,
        max_decoding_length=len(prefix) + 1,
    )
    tokens = forced.hypotheses[0][: len(prefix)]
    (scored,) = translator.score_batch([source.tokens], [tokens])
    hypothesis = to_hypothesis(["swh_Latn"], tokens, forced.scores[0], scored.log_probs, forced.attention[0])
    assert hypothesis.tokens == target_pieces
    target = sp.decode(hypothesis.tokens)
    assert target.tokens == split_words(target_text)
    result = build_result(source, target, hypothesis)
    _check(result, segment)
    expected = [
        math.exp(np.mean([hypothesis.log_probs[i] for i in pieces])) for pieces in target.token_pieces
    ]
    assert list(result.confidences) == pytest.approx(expected)
    assert len(result.alignment) == len(target.tokens) == 9


def test_too_long_and_empty_segments_are_rejected(model: NmtModel) -> None:
    with pytest.raises(InputTooLong):
        asyncio.run(model.translate("word " * 100, 1, "eng_Latn", "swh_Latn"))
    with pytest.raises(ValueError):
        asyncio.run(model.translate("   ", 1, "eng_Latn", "swh_Latn"))
    with pytest.raises(ValueError):
        asyncio.run(model.translate("Hello", 1, "eng_Latn", "nope_Xxxx"))


def test_a_text_only_caller_gets_the_same_words_without_the_passes_it_does_not_read(model: NmtModel) -> None:
    """`Detail.TEXT` (SIL Converters, LibreTranslate): the same translation and words, no
    confidences (no scoring pass) and no alignment (no attention), also when it shares a batch
    with callers that read everything."""

    async def both() -> tuple[list[list[TranslationResult]], list[list[TranslationResult]]]:
        full = [model.translate(s, 2, "eng_Latn", "swh_Latn") for s in SEGMENTS]
        text = [model.translate(s, 2, "eng_Latn", "swh_Latn", detail=Detail.TEXT) for s in SEGMENTS]
        answers = await asyncio.gather(*full, *text)
        return answers[: len(SEGMENTS)], answers[len(SEGMENTS) :]

    full, text = asyncio.run(both())
    for full_results, text_results in zip(full, text, strict=True):
        assert [r.translation for r in text_results] == [r.translation for r in full_results]
        assert [r.target_tokens for r in text_results] == [r.target_tokens for r in full_results]
        assert all(r.confidences == () and r.alignment == () for r in text_results)
        assert all(len(r.confidences) == len(r.target_tokens) and r.alignment for r in full_results)


def _most_attended(
    source: EncodedSource, target: DecodedTarget, attention: np.ndarray
) -> list[tuple[int, int]]:
    """The definition, word by word: the source word whose pieces got the most attention from the
    target word's pieces (rows past the attention's end count for nothing)."""
    columns = attention[:, 1 : 1 + len(source.pieces)]
    pairs = []
    for t, pieces in enumerate(target.token_pieces):
        rows = [i for i in pieces if i < columns.shape[0]]
        if rows:
            totals = [
                sum(float(columns[r, p]) for r in rows for p, w in enumerate(source.piece_words) if w == s)
                for s in range(len(source.words))
            ]
            pairs.append((totals.index(max(totals)), t))
    return pairs


def test_each_target_word_is_aligned_to_the_source_word_its_pieces_attend_most() -> None:
    """Random words, pieces (a piece may belong to two target words, source pieces may be out of
    their words' order) and attention, some rows short of the target's pieces: the node's
    vectorized alignment agrees with the definition."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n_words = int(rng.integers(1, 12))
        piece_words = sorted(
            [*range(n_words), *rng.integers(0, n_words, size=int(rng.integers(0, 6))).tolist()]
        )
        if rng.random() < 0.3 and len(piece_words) > 1:
            # Moses moves a comma inside a closing quote: its piece comes before the quote's.
            i = int(rng.integers(0, len(piece_words) - 1))
            piece_words[i], piece_words[i + 1] = piece_words[i + 1], piece_words[i]
        source = EncodedSource(
            "s",
            "eng_Latn",
            [f"w{i}" for i in range(n_words)],
            [f"p{i}" for i in range(len(piece_words))],
            piece_words,
        )
        token_pieces, position = [], 0
        for _ in range(int(rng.integers(1, 12))):
            length = int(rng.integers(1, 3))
            token_pieces.append(list(range(max(0, position - int(rng.integers(0, 2))), position + length)))
            position += length
        target = DecodedTarget([f"t{i}" for i in range(len(token_pieces))], token_pieces, "t")
        rows = max(1, position + int(rng.integers(-2, 2)))
        attention = rng.random((rows, len(piece_words) + 2)).astype(np.float32)
        assert word_alignment(source, target, attention) == _most_attended(source, target, attention)
