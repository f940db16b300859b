"""The records the translate path needs on every request (the caller's API key, the engine), kept
for `api.lookup_cache_s` so a translation costs no database round trip.

Profiling the full path at 64 concurrent clients showed three database transactions per translate
(the key, the engine, the train-segment check) taking most of the API service's time. Entries are
dropped as soon as this replica hears of a change (`ChangeNotifier`: its own writes, and on
PostgreSQL the other replicas'); the time limit bounds only changes written by other means.
Unknown keys are never kept, so guessing keys cannot fill the cache. Concurrent misses on one key
share one read: when an entry expires under load, one request reads the database and the others
wait for it instead of each reading it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache
from sqlalchemy import exists, select

from serval_api.auth import Caller
from serval_api.db.database import Database
from serval_api.db.models import EngineRow, TrainSegmentRow
from serval_api.service.changes import API_KEYS, ChangeNotifier, engine_key
from serval_api.service.keys import authenticate_api_key, expired, hash_secret

MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class EngineRecord:
    engine: EngineRow
    """Detached from its session: read it, never change it."""
    has_train_segments: bool
    """Whether any segment was trained; only then does a translation look for a stored human one."""


class Lookups:
    def __init__(self, db: Database, changes: ChangeNotifier, ttl_s: float) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._callers: TTLCache[str, Caller] = TTLCache(MAX_ENTRIES, ttl_s or 1)
        self._engines: TTLCache[str, EngineRecord] = TTLCache(MAX_ENTRIES, ttl_s or 1)
        self._reading: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._generation = 0
        """Counts the changes heard: a read that a change overtook is not kept."""
        """(kind, key) → the database read in flight for it, which concurrent misses share."""
        changes.subscribe(self._changed)

    async def caller(self, api_key: str) -> Caller | None:
        digest = hash_secret(api_key)
        cached = self._callers.get(digest)
        if cached is not None:
            if expired(cached.expires_at):  # a key expires on time, kept or not
                self._callers.pop(digest, None)
                return None
            return cached
        generation = self._generation
        caller: Caller | None = await self._once(
            ("caller", digest), lambda: authenticate_api_key(self._db, api_key)
        )
        if caller is not None and self._ttl_s > 0 and generation == self._generation:
            self._callers[digest] = caller
        return caller

    async def engine(self, engine_id: str) -> EngineRecord | None:
        cached = self._engines.get(engine_id)
        if cached is not None:
            return cached
        generation = self._generation
        record: EngineRecord | None = await self._once(
            ("engine", engine_id), lambda: self._read_engine(engine_id)
        )
        if record is not None and self._ttl_s > 0 and generation == self._generation:
            self._engines[engine_id] = record
        return record

    async def _once(self, key: tuple[str, str], read: Callable[[], Awaitable[Any]]) -> Any:
        """`read()`'s result, shared with every caller that misses on `key` while it runs."""
        pending = self._reading.get(key)
        if pending is None:
            pending = self._reading[key] = asyncio.ensure_future(read())
            pending.add_done_callback(
                lambda done: self._reading.pop(key, None) if self._reading.get(key) is done else None
            )
        return await asyncio.shield(pending)

    async def _read_engine(self, engine_id: str) -> EngineRecord | None:
        async with self._db.session() as s:
            engine = await s.get(EngineRow, engine_id)
            if engine is None:
                return None
            trained = await s.scalar(select(exists().where(TrainSegmentRow.engine_id == engine_id)))
        return EngineRecord(engine, bool(trained))

    def _changed(self, key: str | None) -> None:
        # A read in flight may have started before the change: it is not kept, and later misses
        # read afresh.
        self._generation += 1
        if key is None:
            self._reading.clear()
            self._callers.clear()
            self._engines.clear()
        elif key == API_KEYS:
            self._reading = {k: v for k, v in self._reading.items() if k[0] != "caller"}
            self._callers.clear()
        elif key.startswith(engine_key("")):
            engine_id = key.removeprefix(engine_key(""))
            self._reading.pop(("engine", engine_id), None)
            self._engines.pop(engine_id, None)
