"""Small asyncio helpers every component uses."""

from __future__ import annotations

import asyncio


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
