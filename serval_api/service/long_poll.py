"""Long polls: re-read an entity whenever the `ChangeNotifier` says it changed, until the caller's
condition holds or `services.long_poll_max_s` runs out (408). Builds and the builds feed wait this
way; it knows nothing of either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from serval_api.auth import Caller
from serval_api.errors import Timeout
from serval_api.service.context import Services
from serval_common.aio import uninterrupted, wait_changed

T = TypeVar("T")


async def wait_until(
    services: Services,
    key: str,
    read: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    *,
    caller: Caller,
    timeout_message: str = "the awaited revision was not reached in time; poll again",
) -> T:
    """Re-read whenever `key` is notified until `done`, for at most `services.long_poll_max_s` (408).
    `read` checks the caller's access: the first read runs before anything is registered, so a
    refused or unknown id answers at once and leaves no trace in the `ChangeNotifier`. A poll
    that waits counts against the caller's concurrent long polls while it does. A poll cancelled
    during a read (its client left) ends once the read has (`uninterrupted`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + services.long_poll_max_s
    value = await uninterrupted(read())
    if done(value):
        return value
    async with services.quotas.long_poll(caller):
        while True:
            with services.changes.watch(key) as changed:
                value = await uninterrupted(read())
                if done(value):
                    return value
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise Timeout(timeout_message)
                if not await wait_changed(changed, remaining):
                    raise Timeout(timeout_message)
