"""The records the translate path needs on every request (the caller's API key, the engine), kept
for `api.lookup_cache_s` so a translation costs no database round trip.

Profiling the full path at 64 concurrent clients showed three database transactions per translate
(the key, the engine, the train-segment check) taking most of the API service's time. Entries are
dropped as soon as this replica hears of a change (`ChangeNotifier`: its own writes, and on
PostgreSQL the other replicas'); the time limit bounds only changes written by other means.
Unknown keys are never kept, so guessing keys cannot fill the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from cachetools import TTLCache
from sqlalchemy import exists, select

from serval_api.auth import Caller
from serval_api.db.database import Database
from serval_api.db.models import Engine, TrainSegment
from serval_api.service.changes import API_KEYS, ChangeNotifier, engine_key
from serval_api.service.keys import authenticate_api_key, hash_secret

MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class EngineRecord:
    engine: Engine
    """Detached from its session: read it, never change it."""
    has_train_segments: bool
    """Whether any segment was trained; only then does a translation look for a stored human one."""


class Lookups:
    def __init__(self, db: Database, changes: ChangeNotifier, ttl_s: float) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._callers: TTLCache[str, Caller] = TTLCache(MAX_ENTRIES, ttl_s or 1)
        self._engines: TTLCache[str, EngineRecord] = TTLCache(MAX_ENTRIES, ttl_s or 1)
        changes.subscribe(self._changed)

    async def caller(self, api_key: str) -> Caller | None:
        digest = hash_secret(api_key)
        cached = self._callers.get(digest)
        if cached is not None:
            return cached
        caller = await authenticate_api_key(self._db, api_key)
        if caller is not None and self._ttl_s > 0:
            self._callers[digest] = caller
        return caller

    async def engine(self, engine_id: str) -> EngineRecord | None:
        cached = self._engines.get(engine_id)
        if cached is not None:
            return cached
        async with self._db.session() as s:
            engine = await s.get(Engine, engine_id)
            if engine is None:
                return None
            trained = await s.scalar(select(exists().where(TrainSegment.engine_id == engine_id)))
        record = EngineRecord(engine, bool(trained))
        if self._ttl_s > 0:
            self._engines[engine_id] = record
        return record

    def _changed(self, key: str | None) -> None:
        if key is None:
            self._callers.clear()
            self._engines.clear()
        elif key == API_KEYS:
            self._callers.clear()
        elif key.startswith(engine_key("")):
            self._engines.pop(key.removeprefix(engine_key("")), None)
