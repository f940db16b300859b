"""Train-segment pairs: human translations stored per engine.

A pair answers translate at once when the client's segment matches its source exactly after
`normalize` (NFC, whitespace runs as one space, stripped; case and punctuation kept), and is
appended to the engine's next build as training data. The match is keyed by the SHA-256 of the
normalized source, so a key's length never depends on the segment's.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.models import Engine, TrainSegment, utcnow

_WHITESPACE = re.compile(r"\s+")


def normalize(segment: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", segment)).strip()


def source_key(segment: str) -> str:
    return hashlib.sha256(normalize(segment).encode()).hexdigest()


async def store_pair(
    s: AsyncSession, engine: Engine, source_segment: str, target_segment: str, sentence_start: bool
) -> None:
    """Inserts the pair or replaces the target of the pair with the same normalized source.
    The caller holds the engine's row lock, so concurrent trainings of one source take turns."""
    key = source_key(source_segment)
    existing = await s.scalar(
        select(TrainSegment).where(TrainSegment.engine_id == engine.id, TrainSegment.source_key == key)
    )
    now = utcnow()
    if existing is None:
        s.add(
            TrainSegment(
                engine_id=engine.id,
                owner=engine.owner,
                source_key=key,
                source_segment=source_segment,
                target_segment=target_segment,
                sentence_start=sentence_start,
                created_at=now,
                updated_at=now,
            )
        )
        return
    existing.source_segment = source_segment
    existing.target_segment = target_segment
    existing.sentence_start = sentence_start
    existing.updated_at = now


async def find_target(s: AsyncSession, engine_id: str, segment: str) -> str | None:
    return await s.scalar(
        select(TrainSegment.target_segment).where(
            TrainSegment.engine_id == engine_id, TrainSegment.source_key == source_key(segment)
        )
    )


async def training_pairs(s: AsyncSession, engine_id: str) -> list[tuple[str, str]]:
    """The engine's pairs, oldest first, each side on one line."""
    rows = await s.execute(
        select(TrainSegment.source_segment, TrainSegment.target_segment)
        .where(TrainSegment.engine_id == engine_id)
        .order_by(TrainSegment.created_at, TrainSegment.id)
    )
    return [(normalize(src), normalize(trg)) for src, trg in rows.all()]
