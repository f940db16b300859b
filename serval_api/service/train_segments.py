"""Train-segment pairs: human translations stored per engine.

For an engine whose family does not learn segments (nmt, echo), a pair answers translate at once
when the client's segment matches its source exactly after `normalize` (NFC, whitespace runs as
one space, stripped; case and punctuation kept). For one that does (smt-transfer), every node
serving the engine learns the pair and the model answers; nodes loading a revision later replay
the pairs trained since the revision's build (`replay`). Either way the pair joins the engine's
next build as training data. The match is keyed by the SHA-256 of the normalized source, so a
key's length never depends on the segment's.

`TrainSegment.id` is the pair's sequence number (`seq`): it increases with every pair stored, a
pair trained again is stored as a new row, and nodes apply each number once.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.database import Database
from serval_api.db.models import Build, BuildState, Engine, EngineType, TrainSegment, utcnow
from serval_api.routing.work import ModelKey, TrainSegmentWork

_WHITESPACE = re.compile(r"\s+")

LEARNING_FAMILIES = frozenset({EngineType.SMT_TRANSFER})
"""Engine types whose models learn a trained segment themselves (no stored-translation overlay)."""


def learns_segments(engine_type: str) -> bool:
    return engine_type in LEARNING_FAMILIES


def normalize(segment: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", segment)).strip()


def source_key(segment: str) -> str:
    return hashlib.sha256(normalize(segment).encode()).hexdigest()


async def store_pair(
    s: AsyncSession, engine: Engine, source_segment: str, target_segment: str, sentence_start: bool
) -> TrainSegment:
    """Stores the pair as a new row, replacing the pair with the same normalized source; returns
    the row, its `id` assigned. The caller holds the engine's row lock, so concurrent trainings of
    one source take turns.

    The new row is inserted before the old one is deleted (the old one's key set aside first):
    SQLite gives a new rowid as the highest present + 1, so deleting first would hand a retrained
    newest pair its old number again, and nodes that applied it would skip the new target."""
    key = source_key(source_segment)
    existing = await s.scalar(
        select(TrainSegment).where(TrainSegment.engine_id == engine.id, TrainSegment.source_key == key)
    )
    if existing is not None:
        existing.source_key = f"replaced:{existing.id}"
        await s.flush()
    now = utcnow()
    row = TrainSegment(
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
    return row


async def find_target(s: AsyncSession, engine_id: str, segment: str) -> str | None:
    return await s.scalar(
        select(TrainSegment.target_segment).where(
            TrainSegment.engine_id == engine_id, TrainSegment.source_key == source_key(segment)
        )
    )


@dataclass(frozen=True)
class TrainingPairs:
    pairs: list[tuple[str, str]]
    """The engine's pairs in the order they were stored, each side on one line."""
    through: int | None
    """The highest `TrainSegment.id` among them; None when there are none."""


async def training_pairs(s: AsyncSession, engine_id: str) -> TrainingPairs:
    rows = (
        await s.execute(
            select(TrainSegment.id, TrainSegment.source_segment, TrainSegment.target_segment)
            .where(TrainSegment.engine_id == engine_id)
            .order_by(TrainSegment.id)
        )
    ).all()
    return TrainingPairs(
        pairs=[(normalize(src), normalize(trg)) for _, src, trg in rows],
        through=max((row_id for row_id, _, _ in rows), default=None),
    )


async def replay(db: Database, model: ModelKey) -> list[TrainSegmentWork] | None:
    """The pairs a node loading `model` must learn: the engine's pairs stored after those the
    revision's build trained on (all of them when it trained on none), oldest first. None when the
    engine or a completed build of that revision does not exist."""
    async with db.session() as s:
        return await _replay(s, model)


async def _replay(s: AsyncSession, model: ModelKey) -> list[TrainSegmentWork] | None:
    engine = await s.get(Engine, model.engine_id)
    if engine is None:
        return None
    build = await s.scalar(
        select(Build).where(
            Build.engine_id == model.engine_id,
            Build.target_model_revision == model.revision,
            Build.state == BuildState.COMPLETED.value,
        )
    )
    if build is None:
        return None
    query = select(TrainSegment).where(TrainSegment.engine_id == model.engine_id)
    if build.train_segments_through is not None:
        query = query.where(TrainSegment.id > build.train_segments_through)
    rows = (await s.scalars(query.order_by(TrainSegment.id))).all()
    return [
        TrainSegmentWork(
            model=model,
            family=engine.type,
            source_segment=row.source_segment,
            target_segment=row.target_segment,
            sentence_start=row.sentence_start,
            seq=row.id,
        )
        for row in rows
    ]
