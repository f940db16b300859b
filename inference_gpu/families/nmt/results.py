"""TranslationResult from one hypothesis: words, confidences, alignment, sources, phrases.

A word's confidence is the geometric mean of its pieces' probabilities, `exp(mean(log p))`,
so long words are not penalized for being split into many pieces. A target word is aligned
to the source word that receives the most attention summed over the target word's pieces and
the source word's pieces (language codes and `</s>` excluded).
"""

from __future__ import annotations

import math

import numpy as np

from inference_gpu.families.nmt.backends.base import Hypothesis
from serval_common.core import AlignedWordPair, Detail, Phrase, TranslationResult, TranslationSource
from serval_common.nllb_tokenizer import DecodedTarget, EncodedSource

_MIN_LOG_PROB = -700.0


def word_confidences(target: DecodedTarget, log_probs: list[float]) -> list[float]:
    return [
        math.exp(max(_MIN_LOG_PROB, sum(log_probs[i] for i in pieces) / len(pieces)))
        for pieces in target.token_pieces
    ]


def word_alignment(
    source: EncodedSource, target: DecodedTarget, attention: np.ndarray
) -> list[tuple[int, int]]:
    """(source word, target word) pairs, one per target word, from piece-level attention whose
    columns are the source tokens `[code, *pieces, </s>]`.

    Whole-array steps, each a constant number of numpy calls whatever the sentence's length: the
    columns are summed per source word, the rows are summed cumulatively, and a target word's total
    is the difference of two cumulative rows (its pieces are contiguous, as `decode` makes them).
    No step calls BLAS: with the node on one core, BLAS's idle threads spinning after a matrix
    product cost the node more CPU than the products saved (`bench --pin`). A numpy call costs
    microseconds whatever its size, so the grouping of a few dozen pieces is done in Python."""
    if not source.words or attention.ndim != 2:
        return []
    piece_columns = attention[:, 1 : 1 + len(source.pieces)]
    if piece_columns.shape[1] != len(source.pieces):
        return []
    rows = piece_columns.shape[0]
    spans = [
        (target_index, pieces[0], min(pieces[-1] + 1, rows))
        for target_index, pieces in enumerate(target.token_pieces)
        if pieces and pieces[0] < rows
    ]
    if not spans:
        return []
    order, firsts, words = _column_groups(source.piece_words)
    if order is not None:
        piece_columns = piece_columns[:, order]
    summed = np.add.reduceat(piece_columns.astype(np.float64), firsts, axis=1)
    cumulative = np.zeros((rows + 1, len(source.words)))
    if len(words) == len(source.words):  # every word has a piece: the columns are the words
        np.add.accumulate(summed, axis=0, out=cumulative[1:])
    else:
        cumulative[1:, words] = summed
        np.add.accumulate(cumulative[1:], axis=0, out=cumulative[1:])
    targets, begins, ends = zip(*spans, strict=True)
    best = (cumulative[list(ends)] - cumulative[list(begins)]).argmax(axis=1)
    return list(zip(best.tolist(), targets, strict=True))


def _column_groups(piece_words: list[int]) -> tuple[list[int] | None, list[int], list[int]]:
    """How to sum piece columns per word: the column order that groups each word's pieces (None
    when they already are, as they nearly always are), where each group starts, and its word."""
    order = sorted(range(len(piece_words)), key=piece_words.__getitem__)
    grouped = order == list(range(len(piece_words)))
    owners = piece_words if grouped else [piece_words[i] for i in order]
    firsts = [i for i in range(len(owners)) if i == 0 or owners[i] != owners[i - 1]]
    return None if grouped else order, firsts, [owners[i] for i in firsts]


def build_result(
    source: EncodedSource, target: DecodedTarget, hypothesis: Hypothesis, detail: Detail = Detail.FULL
) -> TranslationResult:
    """With `Detail.TEXT` the hypothesis has neither log-probabilities nor attention (the backend
    skipped them): the result has no confidences and no alignment."""
    words = len(target.tokens)
    full = detail is Detail.FULL
    return TranslationResult(
        translation=target.translation,
        source_tokens=tuple(source.words),
        target_tokens=tuple(target.tokens),
        confidences=tuple(word_confidences(target, hypothesis.log_probs)) if full else (),
        sources=(TranslationSource.PRIMARY,) * words,
        alignment=tuple(
            AlignedWordPair(s, t) for s, t in word_alignment(source, target, hypothesis.attention)
        )
        if full
        else (),
        phrases=(Phrase(0, len(source.words), words),),
    )
