"""A session whose task is cancelled leaves the database as it found it. Clients cancel calls all the
time (a dropped long poll, a WatchBuild stream closed early), and the task serving the call is then
cancelled wherever it stands, inside a statement too."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from serval_api.db.database import Database


def test_a_session_cancelled_inside_a_statement_leaves_no_write_lock(tmp_path: Path) -> None:
    """The task is cancelled while its SELECT runs on aiosqlite's thread, and the pool then closes
    the connection with its transaction (BEGIN IMMEDIATE: the write lock) open. The statement
    finishes with a row unread, and the cancelled task's traceback keeps its cursor alive, so
    SQLite defers that close and, without a rollback first, keeps the write lock for as long as the
    traceback lives: every later writer would wait out busy_timeout and fail."""
    asyncio.run(_cancelled_in_a_statement(tmp_path / "db.sqlite"))


async def _cancelled_in_a_statement(path: Path) -> None:
    db = Database(f"sqlite:///{path}")
    entered, release = threading.Event(), threading.Event()

    def pause() -> int:
        entered.set()
        release.wait(30)
        return 1

    def add_pause(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.create_function("pause", 0, pause)

    event.listen(db.engine.sync_engine, "connect", add_pause)
    async with db.session() as s:
        await s.execute(text("CREATE TABLE t (x INTEGER)"))

    async def read() -> None:
        async with db.session() as s:
            await s.execute(text("SELECT pause() FROM (SELECT 1 UNION ALL SELECT 2)"))

    task = asyncio.create_task(read())
    async with asyncio.timeout(30):
        while not entered.is_set():
            await asyncio.sleep(0.01)
    task.cancel()
    release.set()  # the statement returns its first row on aiosqlite's thread; the second is never read
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()  # the task, with its traceback and the cursor in it, stays referenced

    other = sqlite3.connect(path, timeout=2, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # 'database is locked' if the closed connection kept it
        other.execute("INSERT INTO t VALUES (2)")
        other.execute("COMMIT")
    finally:
        other.close()
    async with db.session() as s:
        assert (await s.execute(text("SELECT x FROM t"))).scalars().all() == [2]
    await db.close()
