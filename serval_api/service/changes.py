"""Wake-ups for long polls and `WatchBuild`: one event per key, replaced each time it fires.

A waiter enters `watch(key)`, reads the database, and waits on the event if the state it wants is
not there yet; whoever changes that state calls `notify(key)` after committing. Notifications only
wake waiters, never carry state, so a spurious or repeated wake-up costs one re-read. A key's entry
lives only while someone watches it: the last waiter to leave removes it, so polls on keys that are
never notified leave nothing behind.

On SQLite there is one API replica and the events are all there is. On PostgreSQL several replicas
share the database and a build job reports to whichever one it reaches, so `start` also opens a
`PostgresChangeChannel` (`serval_api/db/notifications.py`): every `notify` is sent as
`NOTIFY serval_changes, '<key>'` and keys other replicas send set the local events. When that
channel's connection comes back after a drop, every local waiter is woken once, since changes may
have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serval_api.db.database import Database
    from serval_api.db.notifications import PostgresChangeChannel


class _Watched:
    __slots__ = ("event", "waiters")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiters = 0


class ChangeNotifier:
    def __init__(self) -> None:
        self._events: dict[str, _Watched] = {}
        self._channel: PostgresChangeChannel | None = None
        self._listeners: list[Callable[[str | None], None]] = []

    def subscribe(self, listener: Callable[[str | None], None]) -> None:
        """Call `listener(key)` for every change this replica hears of, and `listener(None)` when
        changes may have been missed (anything may have changed)."""
        self._listeners.append(listener)

    @contextlib.contextmanager
    def watch(self, key: str) -> Iterator[asyncio.Event]:
        """The event the next `notify(key)` sets. Enter *before* reading the state it guards, so no
        change slips between; leaving drops the key's entry once nobody else watches it."""
        watched = self._events.get(key)
        if watched is None:
            watched = self._events[key] = _Watched()
        watched.waiters += 1
        try:
            yield watched.event
        finally:
            watched.waiters -= 1
            if watched.waiters == 0 and self._events.get(key) is watched:
                del self._events[key]

    def watched_keys(self) -> int:
        """How many keys have waiters now."""
        return len(self._events)

    def waiters(self, key: str) -> int:
        watched = self._events.get(key)
        return 0 if watched is None else watched.waiters

    def notify(self, *keys: str) -> None:
        """Wake this replica's waiters on `keys`, and (on PostgreSQL) the other replicas'."""
        self._wake(keys)
        if self._channel is not None:
            self._channel.publish(keys)

    def wake_all(self) -> None:
        """Wake every waiter, whatever it waits for; each re-reads the database."""
        events, self._events = self._events, {}
        for watched in events.values():
            watched.event.set()
        for listener in self._listeners:
            listener(None)

    async def start(self, db: Database, *, replica: str) -> None:
        """Share changes with the other replicas on `db` (nothing to do on SQLite). `replica`
        names this replica's listener connection (`serval-changes:<replica>`)."""
        if db.is_sqlite or self._channel is not None:
            return
        from serval_api.db.notifications import PostgresChangeChannel  # asyncpg: PostgreSQL only

        channel = PostgresChangeChannel(
            db.url, replica=replica, on_change=lambda key: self._wake((key,)), on_reconnect=self.wake_all
        )
        self._channel = channel
        await channel.start()

    async def stop(self) -> None:
        """Send the notifications still queued, then stop listening; `notify` stays local."""
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.stop()

    def _wake(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            watched = self._events.pop(key, None)
            if watched is not None:
                watched.event.set()
            for listener in self._listeners:
                listener(key)


def build_key(build_id: str) -> str:
    return f"build:{build_id}"


def engine_key(engine_id: str) -> str:
    return f"engine:{engine_id}"


def owner_builds_key(owner: str) -> str:
    """Notified whenever any build of `owner` changes: the builds feed's long poll waits on it."""
    return f"owner-builds:{owner}"


API_KEYS = "api-keys"
"""The key notified when an API key is revoked."""

NODE_TOKENS = "node-tokens"
"""The key notified when a node token is revoked: every replica checks its nodes' tokens at once."""
