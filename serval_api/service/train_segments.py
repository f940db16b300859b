"""Train-segment pairs: human translations stored per engine.

For an engine whose family does not learn segments (nmt, echo), a pair answers translate at once
when the client's segment matches its source exactly after `normalize` (NFC, whitespace runs as
one space, stripped; case and punctuation kept); an nmt revision that reads fuzzy matches also
learns it, as below (`revision_learns`). For one that does (smt-transfer), every node
serving the engine learns the pair and the model answers; nodes loading a revision later replay
the pairs trained since the revision's build, and nodes that missed a pair fetch it
(`DatabaseTrainSegments`, `last_pairs`). Either way the pair joins the engine's
next build as training data. The match is keyed by the SHA-256 of the normalized source, so a
key's length never depends on the segment's.

`TrainSegmentRow.id` is the pair's sequence number (`seq`): it increases with every pair stored, a
pair trained again is stored as a new row, and nodes apply each number once.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ScalarSelect, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.database import Database
from serval_api.db.models import BuildRow, BuildState, EngineRow, TrainSegmentRow, utcnow
from serval_api.routing.work import ReplayStart, TrainSegmentWork
from serval_common.families import family
from serval_common.model_revision import ModelRevision

_WHITESPACE = re.compile(r"\s+")


def learns_segments(engine_type: str) -> bool:
    """Whether the engine type's models learn a trained segment themselves (no stored-translation
    overlay)."""
    return family(engine_type).learns


def revision_learns(engine: EngineRow) -> bool:
    """Whether the engine's current revision learns each trained pair, so the nodes holding it are
    sent the pair: every revision of a family that learns, and an nmt revision that reads fuzzy
    matches from its memory (`EngineRow.model_learns`, docs/learning.md). Such an nmt engine keeps
    the exact-match overlay too."""
    return learns_segments(engine.type) or engine.model_learns


def normalize(segment: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", segment)).strip()


def source_key(segment: str) -> str:
    return hashlib.sha256(normalize(segment).encode()).hexdigest()


@dataclass(frozen=True)
class StoredPair:
    seq: int
    """The pair's number (`TrainSegmentRow.id`)."""
    previous_seq: int
    """The number of the engine's pair stored just before it (0: none): a node that has learned
    less missed a pair and fetches what it lacks."""


async def store_pair(
    s: AsyncSession, engine: EngineRow, source_segment: str, target_segment: str, sentence_start: bool
) -> StoredPair:
    """Stores the pair as a new row, replacing the pair with the same normalized source; returns
    its number and the engine's previous one. The caller holds the engine's row lock, so pairs of
    one engine are numbered in the order they commit, and concurrent trainings take turns.

    The new row is inserted before the old one is deleted (the old one's key set aside first):
    SQLite gives a new rowid as the highest present + 1, so deleting first would hand a retrained
    newest pair its old number again, and nodes that applied it would skip the new target."""
    key = source_key(source_segment)
    previous = await s.scalar(
        select(func.max(TrainSegmentRow.id)).where(TrainSegmentRow.engine_id == engine.id)
    )
    existing = await s.scalar(
        select(TrainSegmentRow).where(
            TrainSegmentRow.engine_id == engine.id, TrainSegmentRow.source_key == key
        )
    )
    if existing is not None:
        existing.source_key = f"replaced:{existing.id}"
        await s.flush()
    now = utcnow()
    row = TrainSegmentRow(
        engine_id=engine.id,
        owner=engine.owner,
        source_key=key,
        source_segment=source_segment,
        target_segment=target_segment,
        sentence_start=sentence_start,
        created_at=now,
        updated_at=now,
    )
    s.add(row)
    await s.flush()
    if existing is not None:
        await s.delete(existing)
    return StoredPair(row.id, previous or 0)


async def find_target(s: AsyncSession, engine_id: str, segment: str) -> str | None:
    return await s.scalar(
        select(TrainSegmentRow.target_segment).where(
            TrainSegmentRow.engine_id == engine_id, TrainSegmentRow.source_key == source_key(segment)
        )
    )


@dataclass(frozen=True)
class TrainingPairs:
    pairs: list[tuple[str, str]]
    """The engine's pairs in the order they were stored, each side on one line."""
    through: int | None
    """The highest `TrainSegmentRow.id` among them; None when there are none."""


async def training_pairs(s: AsyncSession, engine_id: str) -> TrainingPairs:
    rows = (
        await s.execute(
            select(TrainSegmentRow.id, TrainSegmentRow.source_segment, TrainSegmentRow.target_segment)
            .where(TrainSegmentRow.engine_id == engine_id)
            .order_by(TrainSegmentRow.id)
        )
    ).all()
    return TrainingPairs(
        pairs=[(normalize(src), normalize(trg)) for _, src, trg in rows],
        through=max((row_id for row_id, _, _ in rows), default=None),
    )


def learned_since(build: BuildRow) -> ScalarSelect[int]:
    """How many of the engine's pairs were stored after those `build` trained on (all of them when
    it trained on none): the pairs its revision learns by replay. Serval's smt-transfer counts
    them into the engine's `corpusSize` when the build completes (Machine's
    SmtTransferPostprocessBuildJob replays the pairs collected while the build ran). A SQL
    subquery, so that it counts in the transaction that completes the build, under the engine's
    row lock that `train_segment` also takes."""
    query = (
        select(func.count()).select_from(TrainSegmentRow).where(TrainSegmentRow.engine_id == build.engine_id)
    )
    if build.train_segments_through is not None:
        query = query.where(TrainSegmentRow.id > build.train_segments_through)
    return query.scalar_subquery()


_REPLAYABLE_STATES = (BuildState.COMPLETED.value, BuildState.ACTIVE.value, BuildState.PENDING.value)
"""The states of a build whose revision nodes may load: completed, or being completed."""


class DatabaseTrainSegments:
    """The engine's stored pairs as nodes fetch them (`InferenceNodeApi.StreamTrainSegments`): the
    revision's starting point once, then pages by pair number, each in a short transaction of its
    own, so a large replay holds no transaction and no more than a page in memory."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def start(self, model: ModelRevision, after_seq: int = 0) -> ReplayStart | None:
        """None when the engine does not exist, or no build of that revision completed or is
        completing.

        A build still running is one whose completion has the nodes load its revision first
        (`platform.build_completed`'s prefetch), so that the first translate after it reads
        Completed is answered by the new revision: that load replays the pairs trained since the
        build's export before the build is marked Completed. A revision that was never published
        fails its load at the model store, whatever this answers."""
        async with self.db.session() as s:
            engine = await s.get(EngineRow, model.engine_id)
            if engine is None:
                return None
            build = await s.scalar(
                select(BuildRow).where(
                    BuildRow.engine_id == model.engine_id,
                    BuildRow.target_model_revision == model.revision,
                    BuildRow.state.in_(_REPLAYABLE_STATES),
                )
            )
            if build is None:
                return None
            base = build.train_segments_through or 0
            return ReplayStart(model, engine.type, base, max(base, after_seq))

    async def page(self, start: ReplayStart, after: int, limit: int) -> list[TrainSegmentWork]:
        """At most `limit` of the engine's pairs numbered above `after`, oldest first."""
        async with self.db.session() as s:
            rows = (
                await s.scalars(
                    select(TrainSegmentRow)
                    .where(TrainSegmentRow.engine_id == start.model.engine_id, TrainSegmentRow.id > after)
                    .order_by(TrainSegmentRow.id)
                    .limit(limit)
                )
            ).all()
        return [
            TrainSegmentWork(
                model=start.model,
                family=start.family,
                source_segment=row.source_segment,
                target_segment=row.target_segment,
                sentence_start=row.sentence_start,
                seq=row.id,
            )
            for row in rows
        ]


async def last_pairs(db: Database, engine_ids: Iterable[str]) -> dict[str, int]:
    """Engine id → the number of its last stored pair, for those of `engine_ids` that have pairs."""
    ids = sorted(set(engine_ids))
    found: dict[str, int] = {}
    async with db.session() as s:
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            rows = await s.execute(
                select(TrainSegmentRow.engine_id, func.max(TrainSegmentRow.id))
                .where(TrainSegmentRow.engine_id.in_(batch))
                .group_by(TrainSegmentRow.engine_id)
            )
            found.update({engine_id: int(last) for engine_id, last in rows.all() if last is not None})
    return found
