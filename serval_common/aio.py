"""Small asyncio helpers every component uses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")

EventLoop = Literal["auto", "asyncio", "uvloop"]
"""Which event loop `run` starts: uvloop where installed (auto), asyncio's own, or uvloop."""


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


def run(main: Coroutine[Any, Any, T], event_loop: EventLoop = "auto") -> T:
    """`asyncio.run(main)` on the event loop `event_loop` names: uvloop, where it is installed for
    "auto", spends less CPU per request in both long-running processes (gRPC calls, the node
    stream's messages) than asyncio's own loop."""
    try:
        loop_factory = _loop_factory(event_loop)
    except ImportError:
        main.close()  # never started: no "never awaited" warning
        raise
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main)


def _loop_factory(event_loop: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if event_loop == "uvloop":
            raise
        return None
    return uvloop.new_event_loop


def running_loop_name() -> str:
    """The running event loop's kind for the logs: "uvloop" or "asyncio"."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
