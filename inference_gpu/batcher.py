"""A per-model asyncio micro-batcher.

Requests wait in one queue per decoding key. At most `concurrency` backend calls run at once, each
in a worker thread, so while the model is busy new requests pile up into the next, larger batch. A
queue is dispatched when a slot is free and it holds `max_batch_size` requests, or its oldest
request has waited its share: `WAIT_FRACTION` of what the model took to translate a lone request
(measured as it serves), never more than `max_wait_ms`, and not at all when that share is under
the event loop's millisecond timer resolution. A lone request thus costs itself at most 5%
in waiting, and a burst arriving at an idle model shares one batch instead of queueing behind its
first member: on the tiny model (a lone verse in ~5 ms) that is no wait at all; on the 600M shape on a CPU,
where a lone verse takes ~3 s, 100 ms, which gathers a 64-verse burst that the API service hands
over in ~70 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from serval_common.aio import wait_changed

Req = TypeVar("Req", bound="Keyed")
Res = TypeVar("Res")


class Keyed(Protocol):
    @property
    def key(self) -> Hashable: ...


class BatcherClosed(RuntimeError):
    """The batcher was closed before the request was answered."""


@dataclass
class _Item(Generic[Req, Res]):
    request: Req
    future: asyncio.Future[Res]
    queued_at: float


@dataclass
class BatchStats:
    calls: int = 0
    items: int = 0
    sizes: Counter[int] = field(default_factory=Counter)


WAIT_FRACTION = 0.05
COMPANY_MIN = 0.05
"""Below this share of waits that gained a second request, requests stop waiting for company."""
COMPANY_PROBE_EVERY = 16
"""While they do not wait, every this-many-th lone request waits anyway, to notice company returning."""
MIN_WAIT_S = 0.001
"""Shorter waits are not worth it: the event loop's timers (epoll) wake in whole milliseconds, so
waiting 0.15 ms cost the tiny model's requests 1.7 ms each (`bench/`)."""

BatchObserver = Callable[[list[Req], list[float], float, list[Res]], None]
"""Called after each successful batch with its requests, each one's queue wait, the backend seconds
and the results."""


class MicroBatcher(Generic[Req, Res]):
    def __init__(
        self,
        run_batch: Callable[[list[Req]], list[Res]],
        *,
        max_batch_size: int = 32,
        max_wait_ms: float = 100.0,
        concurrency: int = 1,
        on_batch: Callable[[int], None] | None = None,
        name: str = "batcher",
    ) -> None:
        if max_batch_size < 1 or concurrency < 1:
            raise ValueError("max_batch_size and concurrency must be at least 1")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000
        self.on_batch = on_batch
        self.on_result: BatchObserver[Req, Res] | None = None
        self.stats = BatchStats()
        self._queues: dict[Hashable, deque[_Item[Req, Res]]] = {}
        self._free = concurrency
        """Backend calls that may start now (at most `concurrency` run at once)."""
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=name)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Future[Res]] = set()
        self._closed = False
        self._flush = False
        self._lone_s = 0.0
        """Recent backend seconds for a batch of one request (0 until one has run)."""
        self._company = 1.0
        """Recent share of batches whose first request waited and gained company (moving average)."""
        self._unwaited = 0
        """Lone requests started without waiting since company stopped coming."""

    @property
    def pending(self) -> int:
        """Requests queued or in a running batch."""
        queued = sum(not item.future.done() for queue in self._queues.values() for item in queue)
        return queued + len(self._in_flight)

    async def submit(self, request: Req) -> Res:
        if self._closed:
            raise BatcherClosed("the batcher is closed")
        loop = asyncio.get_running_loop()
        self._start(loop)
        assert self._wakeup is not None
        now = loop.time()
        item: _Item[Req, Res] = _Item(request, loop.create_future(), now)
        queue = self._queues.setdefault(request.key, deque())
        queue.append(item)
        if self._free > 0 and (len(queue) >= self.max_batch_size or self.wait_limit_s == 0):
            # Ready now and a backend call is free: start it here rather than a loop turn later.
            self._launch_ready(loop, now)
        elif len(queue) == 1 or len(queue) >= self.max_batch_size:
            self._wakeup.set()
        return await item.future

    async def close(self, *, drain: bool = False) -> None:
        """Stop taking requests. With `drain`, answer everything queued first; otherwise fail
        queued and running requests with `BatcherClosed`."""
        self._closed = True
        if drain:
            self._flush = True
            if self._wakeup is not None:
                self._wakeup.set()
            waiting = [item.future for queue in self._queues.values() for item in queue]
            waiting = [future for future in [*waiting, *self._in_flight] if not future.done()]
            if waiting:
                await asyncio.wait(waiting)
        if self._dispatcher is not None and self._loop is asyncio.get_running_loop():
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        error = BatcherClosed("the batcher was closed")
        for queue in self._queues.values():
            for item in queue:
                _fail(item.future, error)
        self._queues.clear()
        for future in list(self._in_flight):
            _fail(future, error)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not loop:
            if self.pending:
                raise RuntimeError("the batcher is busy on another event loop")
            self._loop = loop
            self._wakeup = asyncio.Event()
            self._dispatcher = loop.create_task(self._dispatch())

    async def _dispatch(self) -> None:
        """Start ready batches while backend calls are free; sleep until the next queue is due or
        something changes (a request, a finished batch)."""
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            self._launch_ready(loop, loop.time())
            delay = self._next_ready_in(loop.time()) if self._free > 0 else None
            if delay is None or delay > 0:
                await wait_changed(self._wakeup, delay)

    @property
    def wait_limit_s(self) -> float:
        """How long the oldest request of a queue waits for others to join its batch: nothing when
        waiting has stopped paying (one client sending one request after another: nobody ever
        joins), except for an occasional probe."""
        share = WAIT_FRACTION * self._lone_s
        if share < MIN_WAIT_S:
            return 0.0
        if self._company < COMPANY_MIN and self._unwaited < COMPANY_PROBE_EVERY:
            return 0.0
        return min(self.max_wait_s, share)

    def _next_ready_in(self, now: float) -> float | None:
        """Seconds until some queue is ready (0 when one is), None when all are empty."""
        soonest: float | None = None
        for queue in self._queues.values():
            while queue and queue[0].future.done():
                queue.popleft()
            if not queue:
                continue
            if self._flush or len(queue) >= self.max_batch_size:
                return 0.0
            wait = max(0.0, queue[0].queued_at + self.wait_limit_s - now)
            soonest = wait if soonest is None else min(soonest, wait)
        return soonest

    def _take(self, now: float) -> list[_Item[Req, Res]]:
        """Up to `max_batch_size` live requests of the ready queue whose oldest waited longest."""
        ready = [
            (queue[0].queued_at, key)
            for key, queue in self._queues.items()
            if queue
            and (
                self._flush
                or len(queue) >= self.max_batch_size
                or queue[0].queued_at + self.wait_limit_s <= now
            )
        ]
        if not ready:
            return []
        key = min(ready, key=lambda entry: entry[0])[1]
        queue = self._queues[key]
        batch: list[_Item[Req, Res]] = []
        while queue and len(batch) < self.max_batch_size:
            item = queue.popleft()
            if not item.future.done():
                batch.append(item)
        if not queue:
            del self._queues[key]
        return batch

    def _launch_ready(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        """Start a backend call for every ready batch while calls are free."""
        while self._free > 0:
            batch = self._take(now)
            if not batch:
                return
            self._launch(loop, batch)

    def _launch(self, loop: asyncio.AbstractEventLoop, batch: list[_Item[Req, Res]]) -> None:
        """Run one batch in a worker thread; `_finish` answers it on the event loop."""
        self._free -= 1
        self._in_flight.update(item.future for item in batch)
        self.stats.calls += 1
        self.stats.items += len(batch)
        self.stats.sizes[len(batch)] += 1
        if self.on_batch is not None:
            self.on_batch(len(batch))
        requests = [item.request for item in batch]
        started = loop.time()
        if started - batch[0].queued_at >= MIN_WAIT_S / 2:  # it waited for company: did any come?
            self._company = 0.8 * self._company + 0.2 * (len(batch) > 1)
            self._unwaited = 0
        elif len(batch) == 1 and self._company < COMPANY_MIN:
            self._unwaited += 1
        running = self._executor.submit(self._run_timed, requests)

        def answer(done: Future[tuple[list[Res], float]]) -> None:  # on the worker thread
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(self._finish, batch, requests, started, done)

        # Not `run_in_executor`: its asyncio future, chained to the thread's, costs the loop a
        # callback and a copy per batch, which a lone request feels (`bench`).
        running.add_done_callback(answer)

    def _run_timed(self, requests: list[Req]) -> tuple[list[Res], float]:
        """The backend's results and seconds, timed on the worker thread: the hand-offs between
        the event loop and the thread are not the backend's."""
        started = time.perf_counter()
        results = self._run_batch(requests)
        return results, time.perf_counter() - started

    def _finish(
        self,
        batch: list[_Item[Req, Res]],
        requests: list[Req],
        started: float,
        done: Future[tuple[list[Res], float]],
    ) -> None:
        futures = [item.future for item in batch]
        try:
            results, seconds = done.result()
            if len(results) != len(batch):
                raise RuntimeError(f"the backend answered {len(results)} of {len(batch)} requests")
            if len(batch) == 1:
                self._lone_s = seconds if not self._lone_s else 0.8 * self._lone_s + 0.2 * seconds
            if self.on_result is not None:
                self.on_result(requests, [started - item.queued_at for item in batch], seconds, results)
        except BaseException as exc:
            interrupted = isinstance(exc, CancelledError) or not isinstance(exc, Exception)
            error = BatcherClosed("the batch was interrupted") if interrupted else exc
            for future in futures:
                _fail(future, error)
        else:
            for future, result in zip(futures, results, strict=True):
                if not future.done():
                    future.set_result(result)
        finally:
            self._in_flight.difference_update(futures)
            self._free += 1
            if self._wakeup is not None:
                self._wakeup.set()


def _fail(future: asyncio.Future[Res], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
