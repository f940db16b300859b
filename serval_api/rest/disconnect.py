"""Work a REST caller is waiting for is cancelled when the caller hangs up, so the dispatcher
cancels its work item on the node (gRPC does this by itself: a cancelled call cancels its handler)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from serval_api.errors import ClientClosedRequest

T = TypeVar("T")


async def while_connected(request: Request, work: Awaitable[T]) -> T:
    """Await `work` unless the client disconnects first; then cancel it and raise
    `ClientClosedRequest`. The request body must already have been read."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientClosedRequest("the client closed the connection before the answer was ready")
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
