"""Per-key limits: one tenant cannot take what the others need (docs/limits.md).

- **Translate-type requests per minute, per API key** (`limits.translate_per_minute`): translate,
  translate with a prefix, word graph, train-segment, word alignment of a pair, and each sentence
  of a text the dialects translate (a text counts at most the key's whole limit).
- **Build starts per hour, per owner** (`limits.build_starts_per_hour`).
- **Concurrent long polls, per API key** (`limits.concurrent_long_polls`): REST long polls while
  they wait, gRPC WatchBuild while it streams.
- **Characters per request, per API key**: an administrator's `max_chars_per_request` in place of
  `api.max_segment_chars` and `api.max_text_chars` (over them: 413 or 400, as before).

Over a limit a request is refused with `RateLimited` (429 / RESOURCE_EXHAUSTED) and when to try
again, after `limits.refusal_delay_s` (1 s): a client that ignores Retry-After and loops on
refusals would otherwise keep the event loop busy with cheap answers and slow every other key
(bench/tenants.py measures it). An administrator overrides any limit for one key (`Caller.limits`); a JWT caller has the
settings, counted per owner.

**Shared by every replica, kept across restarts.** Rates are counted in fixed windows aligned to
the clock (a minute, an hour) in `rate_windows`, one row per subject, limit and window that every
replica adds to atomically (`INSERT … ON CONFLICT DO UPDATE … RETURNING`, on PostgreSQL and SQLite
alike). So that the translate path does not pay a database round trip per request, a replica
takes a key's allowance a few at a time (a twentieth of its per-minute limit, at most 100) and
spends them locally; a replica may therefore refuse a key up to that many requests per replica
early within a window, never late. Once the window is full a replica refuses the key without
asking the database until the window ends. Long polls are counted in memory as they start and
end; each replica writes its counts to `long_poll_counts` about once a second (when they
changed) and reads the others', so a key's polls over all replicas are held to its limit within
that second; a dead replica's counts lapse after `limits.long_poll_lease_s`. (SQLite serves one
replica: its counts stay in memory.)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from serval_api.auth import Caller
from serval_api.db.database import Database
from serval_api.db.models import LongPollCountRow, RateWindowRow, utcnow
from serval_api.errors import RateLimited
from serval_common.settings import LimitSettings

log = logging.getLogger(__name__)

MINUTE_S = 60
HOUR_S = 3600
CHUNK_DIVISOR = 20
"""A replica takes a key's per-minute allowance a twentieth at a time…"""
MAX_CHUNK = 100
"""…and never more than this many at once."""
SUBJECT_CHARS = 250
LONG_POLL_RETRY_AFTER_S = 5.0
SHARE_INTERVAL_S = 1.0
"""How often a replica writes its long poll counts (when they changed) and reads the others'."""
SWEEP_INTERVAL_S = 300.0
"""How often ended windows and lapsed long polls are deleted (by every replica; it is idempotent)."""


class Limit(StrEnum):
    TRANSLATE = "translate"
    BUILD_START = "build_start"
    LONG_POLL = "long_poll"


@dataclass
class _Allowance:
    """What this replica took of one subject's limit in one window and has not spent yet."""

    window_start: int
    limit: int
    """The limit `remaining` was taken under."""
    remaining: int = 0
    full_at: int | None = None
    """The limit at which the database's window was found full: refused locally until it ends (a
    raised limit asks again)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    refusal_logged: bool = False


class Quotas:
    def __init__(self, db: Database, settings: LimitSettings, *, replica: str) -> None:
        self._db = db
        self._settings = settings
        self._replica = replica[:200]
        self._allowances: dict[tuple[Limit, str], _Allowance] = {}
        self._held: dict[str, int] = {}
        """Subject → long polls waiting on this replica."""
        self._held_elsewhere: dict[str, int] = {}
        """Subject → long polls waiting on the other replicas, as they last wrote them."""
        self._changed: set[str] = set()
        """Subjects whose count here changed since it was last written."""
        self._waiting = 0
        """Long polls waiting on this replica, every key's, limited or not (a metrics gauge)."""
        self._next_renewal = 0.0
        self._task: asyncio.Task[None] | None = None
        self.on_refused: Callable[[Limit], None] | None = None
        """Called once per refusal (the metrics count them)."""

    # ---- the limits ------------------------------------------------------------------------

    @property
    def long_polls_waiting(self) -> int:
        """Long polls (and build watches) waiting on this replica now, every key's."""
        return self._waiting

    def max_chars(self, caller: Caller, default: int) -> int:
        """The longest segment or text `caller` may send in one request."""
        override = caller.limits.max_chars_per_request
        return default if override is None else override

    async def translate(self, caller: Caller, count: int = 1, *, counted: int = 0) -> None:
        """Count `count` translate-type requests of `caller`'s key (the sentences of a dialect's
        text), all or none; `RateLimited` when they do not fit its limit. `counted`: how many of the
        same client request were counted already: one request counts at most the key's whole limit,
        so that a text of more sentences than the limit is not refused for ever."""
        limit = _pick(caller.limits.translate_per_minute, self._settings.translate_per_minute)
        if limit == 0:
            return
        count = min(count, limit - counted)
        if count <= 0:
            return
        chunk = max(1, min(MAX_CHUNK, limit // CHUNK_DIVISOR))
        await self._take(
            Limit.TRANSLATE,
            key_subject(caller),
            limit,
            MINUTE_S,
            chunk,
            lambda wait: (
                f"Too many requests: this API key may make {limit} translation requests a minute; "
                f"try again in {wait} s."
            ),
            count,
        )

    async def build_start(self, caller: Caller) -> None:
        """Count one build start of `caller`'s owner; `RateLimited` over its limit."""
        limit = _pick(caller.limits.build_starts_per_hour, self._settings.build_starts_per_hour)
        if limit == 0:
            return
        await self._take(
            Limit.BUILD_START,
            _subject("owner", caller.owner),
            limit,
            HOUR_S,
            1,
            lambda wait: (
                f"Too many builds: an owner may start {limit} builds an hour; try again in {wait} s."
            ),
        )

    @contextlib.asynccontextmanager
    async def long_poll(self, caller: Caller) -> AsyncIterator[None]:
        """Held while one of `caller`'s long polls waits; `RateLimited` when its key already holds
        its limit's worth: this replica's, counted exactly, and the other replicas', as they last
        wrote them (at most a second or two old). Nothing here waits on the database."""
        subject = await self._claim_long_poll(caller)
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
            if subject is not None:
                self._release_long_poll(subject)

    async def _claim_long_poll(self, caller: Caller) -> str | None:
        """Count one more long poll of `caller`'s key: the subject counted, None for a key with no
        limit; `RateLimited` when the key already holds its limit's worth."""
        limit = _pick(caller.limits.concurrent_long_polls, self._settings.concurrent_long_polls)
        if limit == 0:
            return None
        subject = key_subject(caller)
        held = self._held.get(subject, 0)
        if held + self._held_elsewhere.get(subject, 0) >= limit:
            self._refused(Limit.LONG_POLL, subject)
            await self._hold(LONG_POLL_RETRY_AFTER_S)
            raise RateLimited(
                f"Too many long polls: this API key may wait on {limit} at once; try again when one ends.",
                retry_after_s=LONG_POLL_RETRY_AFTER_S,
            )
        self._held[subject] = held + 1
        self._changed.add(subject)
        return subject

    def _release_long_poll(self, subject: str) -> None:
        left = self._held.get(subject, 1) - 1
        if left > 0:
            self._held[subject] = left
        else:
            self._held.pop(subject, None)
        self._changed.add(subject)

    # ---- counting --------------------------------------------------------------------------

    async def _take(
        self,
        kind: Limit,
        subject: str,
        limit: int,
        window_s: int,
        chunk: int,
        message: Callable[[int], str],
        count: int = 1,
    ) -> None:
        """Take `count` of the subject's allowance in this window, all or none."""
        now = time.time()
        start = int(now // window_s) * window_s
        allowance = self._allowances.get((kind, subject))
        if allowance is None or allowance.window_start != start:
            allowance = self._allowances[(kind, subject)] = _Allowance(start, limit)
        if limit < allowance.limit:
            # Lowered (an administrator's override) since this replica took its allowance: what it
            # holds unspent was taken under the higher limit. Drop it and ask the database again;
            # the dropped part stays counted there, so the key is refused early, never late.
            allowance.remaining = 0
        allowance.limit = limit
        while True:
            if allowance.remaining >= count:
                allowance.remaining -= count
                return
            if allowance.full_at == limit:
                break
            async with allowance.lock:
                if allowance.remaining >= count or allowance.full_at == limit:
                    continue  # another request took more (or found the window full) meanwhile
                asked = max(chunk, count - allowance.remaining)
                used = await self._reserve(subject, kind, start, asked)
                granted = max(0, min(asked, limit - (used - asked)))
                allowance.remaining += granted
                if granted < asked:
                    allowance.full_at = limit
        wait = max(1, math.ceil(start + window_s - time.time()))
        if not allowance.refusal_logged:
            allowance.refusal_logged = True
            log.info(
                "per-key limit reached", extra={"limit": kind.value, "subject": subject, "per_window": limit}
            )
        self._refused(kind, subject)
        await self._hold(wait)
        raise RateLimited(message(wait), retry_after_s=wait)

    async def _reserve(self, subject: str, kind: Limit, window_start: int, count: int) -> int:
        """Add `count` to the window's row (made if missing); what it holds now, every replica's."""
        insert = sqlite.insert if self._db.is_sqlite else postgresql.insert
        statement = (
            insert(RateWindowRow)
            .values(subject=subject, kind=kind.value, window_start=window_start, used=count)
            .on_conflict_do_update(
                index_elements=[RateWindowRow.subject, RateWindowRow.kind, RateWindowRow.window_start],
                set_={"used": RateWindowRow.used + count},
            )
            .returning(RateWindowRow.used)
        )
        async with self._db.session() as s:
            used = (await s.execute(statement)).scalar_one()
        return int(used)

    async def _hold(self, retry_after_s: float) -> None:
        """A refusal waits `limits.refusal_delay_s` (never past its Retry-After) before it is sent,
        so that a client that sends again at once cannot spin on cheap refusals: it holds nothing
        meanwhile (no lock, no long poll place, no node)."""
        delay = min(self._settings.refusal_delay_s, retry_after_s)
        if delay > 0:
            await asyncio.sleep(delay)

    def _refused(self, kind: Limit, subject: str) -> None:
        log.debug("refused by a per-key limit", extra={"limit": kind.value, "subject": subject})
        if self.on_refused is not None:
            self.on_refused(kind)

    # ---- upkeep ----------------------------------------------------------------------------

    async def start(self) -> None:
        # Counts a previous process of this replica left describe polls that ended with it.
        async with self._db.session() as s:
            await s.execute(delete(LongPollCountRow).where(LongPollCountRow.replica == self._replica))
        self._task = asyncio.create_task(self._upkeep(), name="quota-upkeep")

    async def stop(self) -> None:
        """Stop sharing; this replica's long poll counts go."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(Exception):
            async with self._db.session() as s:
                await s.execute(delete(LongPollCountRow).where(LongPollCountRow.replica == self._replica))

    async def _upkeep(self) -> None:
        next_sweep = time.monotonic()
        while True:
            try:
                await self.share_long_polls()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + SWEEP_INTERVAL_S
                    await self.sweep()
            except Exception:
                log.warning("per-key limit upkeep failed; trying again", exc_info=True)
            await asyncio.sleep(SHARE_INTERVAL_S)

    async def share_long_polls(self) -> None:
        """Write this replica's changed long poll counts, renew them, and read the others'. On
        SQLite there is one replica: its counts in memory are all there are, nothing is written."""
        if self._db.is_sqlite:
            self._changed.clear()
            return
        changed, self._changed = self._changed, set()
        now = utcnow()
        expires = now + timedelta(seconds=self._settings.long_poll_lease_s)
        renew = self._held and time.monotonic() >= self._next_renewal
        if changed or renew:
            insert = sqlite.insert if self._db.is_sqlite else postgresql.insert
            try:
                async with self._db.session() as s:
                    gone = [subject for subject in changed if subject not in self._held]
                    if gone:
                        await s.execute(
                            delete(LongPollCountRow).where(
                                LongPollCountRow.replica == self._replica, LongPollCountRow.subject.in_(gone)
                            )
                        )
                    rows = [
                        {"subject": subject, "replica": self._replica, "held": held, "expires_at": expires}
                        for subject, held in self._held.items()
                        if subject in changed or renew
                    ]
                    if rows:
                        statement = insert(LongPollCountRow).values(rows)
                        await s.execute(
                            statement.on_conflict_do_update(
                                index_elements=[LongPollCountRow.subject, LongPollCountRow.replica],
                                set_={
                                    "held": statement.excluded.held,
                                    "expires_at": statement.excluded.expires_at,
                                },
                            )
                        )
            except Exception:
                self._changed |= changed  # written next time
                raise
            if renew:
                self._next_renewal = time.monotonic() + self._settings.long_poll_lease_s / 3
        async with self._db.session() as s:
            others = (
                await s.execute(
                    select(LongPollCountRow.subject, func.sum(LongPollCountRow.held))
                    .where(LongPollCountRow.replica != self._replica, LongPollCountRow.expires_at > now)
                    .group_by(LongPollCountRow.subject)
                )
            ).all()
        self._held_elsewhere = {subject: int(held or 0) for subject, held in others}

    async def sweep(self) -> None:
        """Delete windows that ended and long poll counts whose replica died; forget ended allowances."""
        now = time.time()
        async with self._db.session() as s:
            await s.execute(delete(RateWindowRow).where(RateWindowRow.window_start < int(now) - 2 * HOUR_S))
            await s.execute(delete(LongPollCountRow).where(LongPollCountRow.expires_at < utcnow()))
        windows = {Limit.TRANSLATE: MINUTE_S, Limit.BUILD_START: HOUR_S}
        for key, allowance in list(self._allowances.items()):
            if allowance.window_start + windows.get(key[0], HOUR_S) < now:
                self._allowances.pop(key, None)


def key_subject(caller: Caller) -> str:
    """Whose per-key limits a request counts against: its API key, or a JWT's owner."""
    return _subject("key", caller.key_id) if caller.key_id else _subject("jwt", caller.owner)


def _subject(kind: str, name: str) -> str:
    subject = f"{kind}:{name}"
    if len(subject) > SUBJECT_CHARS:
        subject = f"{kind}#" + hashlib.sha256(name.encode()).hexdigest()
    return subject


def _pick(override: int | None, setting: int) -> int:
    return setting if override is None else override
