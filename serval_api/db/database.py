"""The async engine and session factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from serval_api.db.migrations import upgrade
from serval_api.errors import InvalidArgument

log = logging.getLogger(__name__)

_MIGRATION_LOCK = 0x5E4FA1
_DATA_EXCEPTION = "22"  # PostgreSQL's SQLSTATE class for values it refuses, such as text holding NUL

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}


def async_url(url: str) -> str:
    """`sqlite:///x.db` → `sqlite+aiosqlite:///x.db`; URLs that already name a driver pass through."""
    scheme, sep, rest = url.partition("://")
    if not sep or "+" in scheme:
        return url
    return f"{_ASYNC_DRIVERS.get(scheme, scheme)}://{rest}"


class Database:
    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = async_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        connect_args: dict[str, Any] = {"timeout": 30} if self.is_sqlite else {}
        self.engine = create_async_engine(self.url, echo=echo, connect_args=connect_args)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin_immediate)
            event.listen(self.engine.sync_engine, "close", _sqlite_roll_back_before_close)
            event.listen(self.engine.sync_engine, "close_detached", _sqlite_roll_back_before_close)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    async def migrate(self) -> None:
        """Upgrade the schema to the newest migration; concurrent callers take turns."""
        if self.is_sqlite:
            _ensure_sqlite_dir(self.url)
        async with self.engine.begin() as conn:
            if not self.is_sqlite:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            await conn.run_sync(upgrade)
        log.info("database ready", extra={"database": self.engine.url.render_as_string()})

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session in one transaction: committed on success, rolled back on error."""
        try:
            async with self._sessions() as session, session.begin():
                yield session
        except DBAPIError as e:
            if str(getattr(e.orig, "sqlstate", "")).startswith(_DATA_EXCEPTION):
                raise InvalidArgument(f"a value cannot be stored: {e.orig}") from e
            raise

    async def close(self) -> None:
        await self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
    dbapi_conn.isolation_level = None


def _sqlite_begin_immediate(conn: Connection) -> None:
    """Take SQLite's write lock when a transaction starts, not at its first write: a transaction
    that read a row then can never lose an update to another writer (SQLite has no FOR UPDATE)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_roll_back_before_close(dbapi_conn: Any, *_: Any) -> None:
    """Queue a ROLLBACK on the connection's own thread, ahead of its close.

    A task cancelled inside a statement (a client that drops a long poll or a WatchBuild) makes the
    pool close that connection with its transaction open. SQLite defers closing a connection while
    any of its statements is alive (a cursor the cancelled task's traceback still holds), and the
    deferred connection keeps the write lock that BEGIN IMMEDIATE took: every writer then waits out
    busy_timeout and fails, until the garbage collector happens to free the cursor. A rollback first
    releases the lock at once; on a connection in no transaction it does nothing. aiosqlite runs what
    is queued in order, so the rollback precedes the close queued next (SQLAlchemy's aiosqlite dialect
    queues its own calls the same way)."""
    driver = dbapi_conn.driver_connection
    raw = getattr(driver, "_connection", None)
    if raw is not None:
        driver._tx.put_nowait((None, raw.rollback))


def _ensure_sqlite_dir(url: str) -> None:
    from pathlib import Path

    path = url.partition(":///")[2]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
