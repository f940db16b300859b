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
    columns are the source tokens `[code, *pieces, </s>]`. Two products, not a loop over target
    words (a third of the node's Python time per request went to that loop): the source pieces'
    columns summed per source word, then the target pieces' rows summed per target word.

    `einsum`, not `@`: a matrix product calls BLAS, whose idle threads spin after each call and
    cost the node about 1 ms of CPU per request on a core it shares with CTranslate2
    (`bench --pin`, gRPC at one client); einsum's own loops take no thread."""
    if not source.words or attention.ndim != 2:
        return []
    n_pieces = len(source.pieces)
    piece_columns = attention[:, 1 : 1 + n_pieces]
    if piece_columns.shape[1] != n_pieces:
        return []
    rows = piece_columns.shape[0]
    per_source_word = np.zeros((n_pieces, len(source.words)), dtype=np.float32)
    per_source_word[np.arange(n_pieces), source.piece_words] = 1.0
    words = [t for t, pieces in enumerate(target.token_pieces) for i in pieces if i < rows]
    if not words:
        return []
    pieces = [i for word_pieces in target.token_pieces for i in word_pieces if i < rows]
    per_target_word = np.zeros((len(target.token_pieces), rows), dtype=np.float32)
    np.add.at(per_target_word, (words, pieces), 1.0)
    by_source_word = np.einsum("rp,ps->rs", piece_columns, per_source_word)
    best = np.einsum("tr,rs->ts", per_target_word, by_source_word).argmax(axis=1).tolist()
    attended = np.count_nonzero(per_target_word, axis=1).tolist()
    return [(best[t], t) for t in range(len(target.token_pieces)) if attended[t]]


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
