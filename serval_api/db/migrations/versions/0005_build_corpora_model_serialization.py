"""Builds' `train_on` and `pretranslate` hold the service's own serialization of what a build
trains on and pretranslates (the service layer's `build_corpora.py`, snake_case) instead of the
client's camelCase request JSON (created 2026-12-08).

Written by hand: the schema is unchanged, only rows move. Before this revision an entry's
`corpusId` could only name a parallel corpus (engine corpora had no API yet), so it becomes
`parallel_corpus_id`; on the way down `corpus_id` (an engine corpus) becomes `corpusId` again.
"""

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FILTER_KEYS = {"corpusId": "corpus_id", "textIds": "text_ids", "scriptureRange": "scripture_range"}
_ENTRY_KEYS = {
    "parallelCorpusId": "parallel_corpus_id",
    "textIds": "text_ids",
    "scriptureRange": "scripture_range",
    "sourceFilters": "source_filters",
    "targetFilters": "target_filters",
}
_SIDES = ("sourceFilters", "targetFilters")

_builds = sa.table(
    "builds",
    sa.column("id", sa.String()),
    sa.column("train_on", sa.JSON()),
    sa.column("pretranslate", sa.JSON()),
)


def _renamed(item: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    return {keys.get(k, k): v for k, v in item.items() if v is not None}


def _up(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    entry = dict(entry)
    if "corpusId" in entry:
        legacy = entry.pop("corpusId")
        entry.setdefault("parallelCorpusId", legacy)
    for side in _SIDES:
        if isinstance(entry.get(side), list):
            entry[side] = [_renamed(f, _FILTER_KEYS) if isinstance(f, dict) else f for f in entry[side]]
    return _renamed(entry, _ENTRY_KEYS)


def _down(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    back = {v: k for k, v in _ENTRY_KEYS.items()} | {"corpus_id": "corpusId"}
    filter_back = {v: k for k, v in _FILTER_KEYS.items()}
    entry = _renamed(entry, back)
    for side in _SIDES:
        if isinstance(entry.get(side), list):
            entry[side] = [_renamed(f, filter_back) if isinstance(f, dict) else f for f in entry[side]]
    return entry


def _convert(change: Callable[[Any], Any]) -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(_builds.c.id, _builds.c.train_on, _builds.c.pretranslate).where(
            sa.or_(_builds.c.train_on.is_not(None), _builds.c.pretranslate.is_not(None))
        )
    ).all()
    for build_id, train_on, pretranslate in rows:
        values = {
            name: [change(e) for e in stored]
            for name, stored in (("train_on", train_on), ("pretranslate", pretranslate))
            if isinstance(stored, list)
        }
        if values:
            connection.execute(sa.update(_builds).where(_builds.c.id == build_id).values(**values))


def upgrade() -> None:
    _convert(_up)


def downgrade() -> None:
    _convert(_down)
