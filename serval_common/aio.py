"""Small asyncio helpers every component uses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_changed(changed: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait up to `timeout_s` (None: for ever) for `changed`; False when the time ran out.

    Unlike Python 3.11's `asyncio.wait_for`, a cancellation that arrives as the event is set is
    never swallowed, so a task that is cancelled while it waits (a client that leaves a long poll,
    a model being closed) always ends."""
    try:
        async with asyncio.timeout(timeout_s):
            await changed.wait()
    except TimeoutError:
        return False
    return True


async def uninterrupted(awaitable: Awaitable[T]) -> T:
    """`awaitable`'s result, run to its end even when the caller is cancelled meanwhile; the
    cancellation is raised once it has ended.

    For a short database read that a cancellation may hit (a client leaving a long poll): SQLAlchemy
    terminates a connection whose use was interrupted, and on aiosqlite that close held every
    pooled connection for about 30 s when many polls left at once."""
    task = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.gather(task, return_exceptions=True)
        raise
