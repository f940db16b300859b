"""How sure the model was of each pretranslation, and of the build's pretranslations together.

Every pretranslation row keeps the confidence its build job streamed with it
(`InsertPretranslations.confidence`): NMT jobs send the exponential of the best hypothesis's
length-normalized score, the geometric mean of its tokens' probabilities; SMT jobs the mean of
the words' confidences; echo builds 1. The field is a plain proto3 `double`, so a job that knows
none sends 0, and a model's real confidence is never 0: a stored confidence of 0 (or less) is
unknown. Serval's 1.20 client reads unknown as -1 (`GetAllPretranslationConfidences`), and Serval
leaves it out of the averages, as this module does.

When a translation build completes, `summary` gives what its execution data records:
`averagePretranslationConfidence`, the geometric mean of the known confidences of its rows (0 when
none is known, as Serval), and one `MODEL-0003` diagnostic per book of Scripture whose own
geometric mean is below `LOW_CONFIDENCE` (Serval's threshold).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import BuildRow, BuildState, PretranslationRow
from serval_api.db.models.build_record import ExecutionData
from serval_api.errors import NotBuilt
from serval_api.service import diagnostics
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_api.service.parallel_corpora import owned_parallel_corpus
from serval_api.service.verse_counts import verse_of

UNKNOWN = -1.0
LOW_CONFIDENCE = 0.25
"""A book whose pretranslations average less than this is reported (Serval's
`PretranslationConfidenceEvaluator`)."""


@dataclass(frozen=True)
class PretranslationConfidence:
    source_refs: list[str]
    target_refs: list[str]
    confidence: float


async def list_confidences(
    services: Services, caller: Caller, engine_id: str, parallel_corpus_id: str
) -> list[PretranslationConfidence]:
    """One entry per pretranslation of the engine's current model revision for one of its parallel
    corpora, in the order the job sent them. Another engine's (or no) parallel corpus is 404, an
    engine never built 409, as Serval answers."""
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id)
        await owned_parallel_corpus(s, caller, engine_id, parallel_corpus_id)
        if engine.model_revision == 0:
            raise NotBuilt(f"engine {engine.id} has no completed build, so no pretranslations")
        query = (
            select(PretranslationRow.source_refs, PretranslationRow.target_refs, PretranslationRow.confidence)
            .join(BuildRow, BuildRow.id == PretranslationRow.build_id)
            .where(
                PretranslationRow.engine_id == engine.id,
                PretranslationRow.model_revision == engine.drafts_revision,
                PretranslationRow.corpus_id == parallel_corpus_id,
                BuildRow.state == BuildState.COMPLETED.value,
            )
            .order_by(PretranslationRow.id)
        )
        rows = (await s.execute(query)).all()
    return [
        PretranslationConfidence(
            source_refs=[str(r) for r in source_refs],
            target_refs=[str(r) for r in target_refs],
            confidence=shown(confidence),
        )
        for source_refs, target_refs, confidence in rows
    ]


def shown(confidence: float | None) -> float:
    """A stored confidence as Serval's 1.20 client reads it: -1 when unknown."""
    return confidence if confidence is not None and confidence > 0 else UNKNOWN


@dataclass
class _Mean:
    """A running geometric mean: the sum of the logarithms and their count."""

    log_total: float = 0.0
    count: int = 0

    def add(self, value: float) -> None:
        self.log_total += math.log(value)
        self.count += 1

    @property
    def value(self) -> float:
        return math.exp(self.log_total / self.count) if self.count else 0.0


@dataclass
class Summary:
    average: float
    low_books: list[tuple[str, float]] = field(default_factory=list)
    """(book, its geometric mean) of each book below `LOW_CONFIDENCE`, in book order of first row."""

    def execution_data(self, recorded: ExecutionData | None, model_name: str) -> ExecutionData:
        """`recorded` with the average (Serval 1.20's `averagePretranslationConfidence`) and the
        low books' diagnostics."""
        with_average = (recorded or ExecutionData()).updated(average_pretranslation_confidence=self.average)
        return diagnostics.merged(
            with_average,
            [diagnostics.low_book_confidence(book, mean, model_name) for book, mean in self.low_books],
        )


def summarize(rows: list[tuple[float | None, list[Any]]]) -> Summary:
    """`rows`: each pretranslation's confidence and target refs. A row counts for a book when its
    first target ref is a verse of Scripture (as Serval: `MAT 1:1`)."""
    overall = _Mean()
    books: dict[str, _Mean] = defaultdict(_Mean)
    for confidence, target_refs in rows:
        if confidence is None or not confidence > 0 or not math.isfinite(confidence):
            continue
        overall.add(confidence)
        verse = verse_of(str(target_refs[0])) if target_refs else None
        if verse is not None:
            books[verse.book].add(confidence)
    low = [(book, mean.value) for book, mean in books.items() if mean.value < LOW_CONFIDENCE]
    return Summary(average=overall.value, low_books=low)


async def build_summary(services: Services, build_id: str) -> Summary:
    """The confidences of the pretranslations a build streamed (read before it completes)."""
    query = (
        select(PretranslationRow.confidence, PretranslationRow.target_refs)
        .where(PretranslationRow.build_id == build_id)
        .order_by(PretranslationRow.id)
    )
    async with services.db.session() as s:
        rows = [(confidence, list(refs)) for confidence, refs in (await s.execute(query)).all()]
    return summarize(rows)
