"""Quotation-mark convention detection: which of sil-machine's standard conventions the target text
of each corpus of the build uses, found the way Serval's jobs find it.

The API service exports every target segment of each corpus the build names to
`builds/{buildId}/target-texts.json`: `[{corpusId, books: [{textId, usfm}], texts: [{textId,
segments[]}]}]`. `books` are a Paratext project's USFM books, as they are in the project;
`texts` are the lines of Text files. sil-machine's `QuoteConventionDetector` reads USFM (it follows
chapters, verses and paragraphs, since a quotation may span verses and paragraphs), so each Text file
becomes one chapter of a book whose verses are its lines.

Each book is analysed alone and the analyses combined weighted by their quotation-mark counts, as
`ParatextProjectQuoteConventionDetector` does for a project. As in Serval, the best-scoring standard
convention is reported whenever any convention scored above zero; a target without recognisable
quotation marks reports none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serval_common.store import ModelStore

if TYPE_CHECKING:
    from machine.punctuation_analysis import QuoteConventionAnalysis

log = logging.getLogger(__name__)

TEXT_BOOK = "XXA"
"""The book a Text file's lines are analysed as (an extra-material book id USFM allows)."""


def target_texts_key(build_id: str) -> str:
    return f"builds/{build_id}/target-texts.json"


@dataclass(frozen=True)
class CorpusConvention:
    corpus_id: str
    convention: str | None
    score: float


@dataclass(frozen=True)
class Detection:
    corpora: list[CorpusConvention]
    convention: str | None
    """The best convention of all the corpora's target text together."""
    score: float


def read_target_texts(store: ModelStore, build_id: str) -> list[dict[str, Any]] | None:
    """None when the export has no such file (a build exported before detection existed)."""
    key = target_texts_key(build_id)
    if not store.exists(key):
        return None
    entries = json.loads(store.read_bytes(key) or b"[]")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "corpusId" in e for e in entries):
        raise ValueError(f"{key} is not a JSON list of corpora")
    return entries


def detect(entries: list[dict[str, Any]]) -> Detection:
    from machine.punctuation_analysis import QuoteConventionAnalysis

    corpora = []
    every: list[QuoteConventionAnalysis] = []
    for entry in entries:
        books = [str(book["usfm"]) for book in entry.get("books", ())]
        books += [text_usfm(text.get("segments", ())) for text in entry.get("texts", ())]
        analyses = [analyze_usfm(usfm) for usfm in books]
        every.extend(analyses)
        name, score = _best(QuoteConventionAnalysis.combine_with_weighted_average(analyses))
        corpora.append(CorpusConvention(str(entry["corpusId"]), name, score))
    name, score = _best(QuoteConventionAnalysis.combine_with_weighted_average(every))
    return Detection(corpora, name, score)


def analyze_usfm(usfm: str) -> QuoteConventionAnalysis:
    """One book's analysis; its weight is the number of quotation marks found."""
    from machine.corpora import parse_usfm
    from machine.punctuation_analysis import QuoteConventionDetector

    detector = QuoteConventionDetector()
    parse_usfm(usfm, detector)
    return detector.detect_quote_convention()


def text_usfm(segments: Iterable[str]) -> str:
    verses = "".join(
        f"\\v {n} {' '.join(str(segment).replace(chr(92), ' ').split())}\n"
        for n, segment in enumerate(segments, 1)
    )
    return f"\\id {TEXT_BOOK}\n\\c 1\n\\p\n{verses}"


def _best(analysis: QuoteConventionAnalysis) -> tuple[str | None, float]:
    convention = analysis.best_quote_convention
    if convention is None or analysis.best_quote_convention_score <= 0:
        return None, 0.0
    return convention.name, analysis.best_quote_convention_score
