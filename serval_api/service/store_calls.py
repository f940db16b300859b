"""The API service's model-store calls, apart from every other blocking call.

A store call blocks a thread until the store answers, and a store that accepts connections but
never replies holds it for as long as the S3 client's timeouts allow (`StoreSettings`). Run in the
default executor, a few dozen such calls would fill it, and everything else that waits on it
(webhook address checks, language detection, file copies…) would stall for every tenant. So the
service's store calls run on a small pool of their own (`StoreCalls`, `api.store_threads`): a hung
store can exhaust only that pool, and store calls queue for it meanwhile.

What runs there is the store call itself (`services.store_call(store.exists, key)`), never code
that waits for another store call: a blocking reader that fetches files through the event loop
(`file_contents.ContentsReader`) stays on the default executor and its store reads come here, so
no thread of the pool ever waits for another.

`SharedCheck` is what the health check asks the store through: one call in flight at a time, its
outcome shared by every probe that arrives meanwhile and reused for a few seconds after
(`api.store_health_cache_s`), so a flood of probes makes at most one store call per few seconds.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class StoreCalls:
    """A bounded thread pool for blocking model-store calls."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="model-store")

    async def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on the pool, in the caller's context (as `asyncio.to_thread`)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await loop.run_in_executor(self._executor, call)

    def close(self) -> None:
        """Refuse new calls and drop queued ones; a call under way ends within the store's timeouts."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class SharedCheck:
    """A check whose one run at a time is shared by every caller that arrives while it runs, and
    whose outcome (success or the exception) is reused for `ttl_s` after it ends."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._run: asyncio.Task[None] | None = None
        self._ended_at = 0.0

    async def __call__(self, check: Callable[[], Awaitable[None]]) -> None:
        run = self._run
        if run is None or run.cancelled() or (run.done() and time.monotonic() - self._ended_at >= self.ttl_s):
            run = self._run = asyncio.ensure_future(check())
            run.add_done_callback(self._ended)
        # A caller that gives up (its own timeout) leaves the run going for the others.
        await asyncio.shield(run)

    def _ended(self, run: asyncio.Task[None]) -> None:
        self._ended_at = time.monotonic()
        if not run.cancelled():
            run.exception()  # retrieved: callers that gave up leave no "never retrieved" warning
