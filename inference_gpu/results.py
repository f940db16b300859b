"""TranslationResult from one hypothesis: words, confidences, alignment, sources, phrases.

A word's confidence is the geometric mean of its pieces' probabilities, `exp(mean(log p))`,
so long words are not penalized for being split into many pieces. A target word is aligned
to the source word that receives the most attention summed over the target word's pieces and
the source word's pieces (language codes and `</s>` excluded).
"""

from __future__ import annotations

import math

import numpy as np

from inference_gpu.backends.base import Hypothesis
from inference_gpu.nllb import DecodedTarget, EncodedSource
from serval_common.core import AlignedWordPair, Detail, Phrase, TranslationResult, TranslationSource

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

    A loop over target words on small slices, on purpose: two vectorized versions (matrix products,
    and einsum) took a third to a half of its time alone, yet cost the node process about 1 ms more
    CPU per request in `bench --pin` at one client (the products' BLAS threads spin; einsum's
    cost there is unexplained). Measure in the node before replacing it."""
    if not source.words or attention.ndim != 2:
        return []
    piece_columns = attention[:, 1 : 1 + len(source.pieces)]
    if piece_columns.shape[1] != len(source.pieces):
        return []
    owners = np.asarray(source.piece_words, dtype=np.intp)
    pairs: list[tuple[int, int]] = []
    for target_index, pieces in enumerate(target.token_pieces):
        rows = [i for i in pieces if i < piece_columns.shape[0]]
        if not rows:
            continue
        per_word = np.bincount(owners, weights=piece_columns[rows].sum(axis=0), minlength=len(source.words))
        pairs.append((int(per_word.argmax()), target_index))
    return pairs


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
