"""Changes shared between API replicas through PostgreSQL's LISTEN/NOTIFY.

Each replica holds one dedicated asyncpg connection (outside SQLAlchemy's pool, which would hand
it to other work) named `serval-changes:<replica>` in `pg_stat_activity`. It LISTENs on
`serval_changes` and also carries this replica's own `NOTIFY serval_changes, '<key>'`: one task
owns the connection, so sends, keep-alive checks and reconnects never overlap.

Delivery is best effort by design: a notification only wakes waiters, who then re-read the
database. So after the connection drops (notifications sent meanwhile are lost to this replica),
the reconnect wakes every local waiter once; keys this replica could not send are kept and sent
after the reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)

CHANNEL = "serval_changes"
# PostgreSQL keeps the first 63 bytes of application_name (NAMEDATALEN - 1).
_APPLICATION_NAME_MAX = 63
# Query keys SQLAlchemy's asyncpg dialect consumes itself; asyncpg would send them to the server
# as settings and fail.
_DIALECT_ONLY_QUERY_KEYS = ("prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback")
# Keys kept while the connection is down; past this, waiters elsewhere rely on their own timeout.
_MAX_PENDING = 10_000


def application_name(replica: str) -> str:
    """The name the listener's connection carries, so operators (and tests) can find it."""
    return f"serval-changes:{replica}"[:_APPLICATION_NAME_MAX]


def asyncpg_dsn(url: str) -> str:
    """`postgresql+asyncpg://…` (SQLAlchemy) → `postgresql://…` (asyncpg), password kept."""
    plain = make_url(url).set(drivername="postgresql").difference_update_query(_DIALECT_ONLY_QUERY_KEYS)
    return plain.render_as_string(hide_password=False)


class PostgresChangeChannel:
    """Publishes keys with NOTIFY and hands keys other replicas publish to `on_change`.

    `on_change(key)` runs for every key another replica sends (this replica's own echoes are
    dropped); `on_reconnect()` runs each time listening resumes after a lost connection.
    """

    def __init__(
        self,
        url: str,
        *,
        replica: str,
        on_change: Callable[[str], None],
        on_reconnect: Callable[[], None],
        keepalive_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 5.0,
    ) -> None:
        self._dsn = asyncpg_dsn(url)
        self._replica = replica
        self._application_name = application_name(replica)
        self._on_change = on_change
        self._on_reconnect = on_reconnect
        self._keepalive_s = keepalive_s
        self._connect_timeout_s = connect_timeout_s
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._listening = asyncio.Event()
        self._server_pid: int | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    async def start(self, ready_timeout_s: float = 10.0) -> None:
        """Start listening; waits (at most `ready_timeout_s`) for the first LISTEN so that no
        change made after start-up is missed. If the database cannot be reached by then, start
        anyway: the task keeps retrying, and its first success wakes every waiter."""
        if self._task is not None:
            return
        self._task = asyncio.create_task(self._run(), name="serval-changes-listener")
        try:
            await asyncio.wait_for(self._listening.wait(), ready_timeout_s)
        except TimeoutError:
            log.warning(
                "change notifications not listening yet; retrying in the background",
                extra={"replica": self._replica, "timeout_s": ready_timeout_s},
            )

    def publish(self, keys: Iterable[str]) -> None:
        """Queue keys for NOTIFY; returns at once (callers have committed and must not wait)."""
        if self._task is None or self._stopping.is_set():
            return
        self._pending.update(keys)
        if len(self._pending) > _MAX_PENDING:
            log.warning(
                "too many change notifications waiting to be sent; dropping them",
                extra={"replica": self._replica, "dropped": len(self._pending)},
            )
            self._pending.clear()
        self._wake.set()

    async def stop(self, flush_timeout_s: float = 2.0) -> None:
        """Send what is queued (at most `flush_timeout_s`), then close the connection."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), flush_timeout_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except Exception:
            log.exception("change notifications stopped with an error", extra={"replica": self._replica})

    async def _run(self) -> None:
        delay = self._backoff_min_s
        connected_before = False
        while not self._stopping.is_set():
            conn: Any = None
            try:
                conn = await asyncpg.connect(
                    self._dsn,
                    timeout=self._connect_timeout_s,
                    server_settings={"application_name": self._application_name},
                )
                conn.add_termination_listener(self._connection_lost)
                await conn.add_listener(CHANNEL, self._received)
                self._server_pid = conn.get_server_pid()
                self._listening.set()
                log.info(
                    "listening for change notifications",
                    extra={"replica": self._replica, "channel": CHANNEL, "reconnect": connected_before},
                )
                if connected_before:
                    # Whatever was sent while this replica was not listening is lost: let every
                    # waiter re-read the database once.
                    self._on_reconnect()
                connected_before = True
                delay = self._backoff_min_s
                await self._serve(conn)
                await conn.close(timeout=self._connect_timeout_s)
                return
            except Exception as e:
                self._listening.clear()
                if conn is not None:
                    conn.terminate()
                if self._stopping.is_set():
                    return
                log.warning(
                    "change notification connection failed; reconnecting",
                    extra={"replica": self._replica, "error": repr(e), "retry_in_s": round(delay, 3)},
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._backoff_max_s)

    async def _serve(self, conn: Any) -> None:
        """Send queued keys and check the connection every `keepalive_s` until stopping; raises
        when the connection is lost (a dropped socket is seen at once, a silent one within two
        keep-alive periods)."""
        while True:
            self._wake.clear()
            if conn.is_closed():
                raise ConnectionError("the change notification connection closed")
            if self._pending:
                keys, self._pending = self._pending, set()
                try:
                    await conn.execute(
                        "SELECT pg_notify($1, key) FROM unnest($2::text[]) AS key",
                        CHANNEL,
                        sorted(keys),
                        timeout=self._keepalive_s,
                    )
                except BaseException:
                    self._pending |= keys
                    raise
                continue
            if self._stopping.is_set():
                return
            try:
                await asyncio.wait_for(self._wake.wait(), self._keepalive_s)
            except TimeoutError:
                await conn.execute("SELECT 1", timeout=self._keepalive_s)

    def _received(self, _conn: Any, pid: int, _channel: str, payload: str) -> None:
        if pid == self._server_pid:
            return  # this replica's own NOTIFY: its waiters were woken when it was sent
        self._on_change(payload)

    def _connection_lost(self, _conn: Any) -> None:
        self._listening.clear()
        self._wake.set()
