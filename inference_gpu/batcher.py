"""A per-model asyncio micro-batcher.

Requests wait in one queue per decoding key. At most `concurrency` backend calls run at once, each
in a worker thread, so while the model is busy new requests pile up into the next, larger batch. A
queue is dispatched when a slot is free and it holds a batch's worth of requests (`batch_cap`), or
its oldest request has waited its share: `WAIT_FRACTION` of what the model took to translate a
lone request (measured as it serves), never more than `max_wait_ms`, and not at all when that
share is under the event loop's millisecond timer resolution. A lone request thus costs itself at most 5%
in waiting, and a burst arriving at an idle model shares one batch instead of queueing behind its
first member: on the tiny model (a lone verse in ~5 ms) that is no wait at all; on the 600M shape on a CPU,
where a lone verse takes ~3 s, 100 ms, which gathers a 64-verse burst that the API service hands
over in ~70 ms.

Fairness: a decoding key's queue serves interactive requests before bulk ones and lets owners take
turns (deficit round robin, weighted by `weights`: `inference_gpu/fair_queue.py`), so one owner's
flood does not hold another owner's request back: it goes into the next batch. Between decoding
keys with a batch ready, the key served least recently goes first, so a flood on one key (n = 1)
holds a request on another (n-best, a word graph) back one batch, not the flood's length.

Latency: the batcher measures what a batch of each size costs the model (`BatchCosts`); with a
`latency_target_ms`, a batch is capped at the size predicted to run within it (never below the size
that costs `FLAT_COST_RATIO` lone requests, nor below one), so a request that arrives while the
model is busy waits about one batch, then rides in one, wherever batch cost grows with size. The
cap holds while the model is shared, from when requests of two owners meet at it until
`SHARED_FOR_S` later; an owner alone gets full batches (`batch_cap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from inference_gpu.fair_queue import FairQueue
from serval_common.aio import wait_changed
from serval_common.core import Sender

Req = TypeVar("Req", bound="Keyed")
Res = TypeVar("Res")


class Keyed(Protocol):
    @property
    def key(self) -> Hashable:
        """Requests of one batch share it (the decoding settings)."""

    @property
    def sender(self) -> Sender:
        """Who asked: owners take turns, interactive work goes first."""


class BatcherClosed(RuntimeError):
    """The batcher was closed before the request was answered."""


@dataclass
class _Item(Generic[Req, Res]):
    request: Req
    future: asyncio.Future[Res]
    queued_at: float

    @property
    def sender(self) -> Sender:
        return self.request.sender

    @property
    def gone(self) -> bool:
        return self.future.done()


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

FLAT_COST_RATIO = 2.0
"""A batch predicted to cost at most this many lone requests is never capped: splitting it would
cost throughput and save a waiting request little (on a GPU, where 32 verses cost about one, the
latency target never bites)."""
COST_SMOOTHING = 0.2
"""Weight of a new measurement in a batch size's moving average of backend seconds."""
SHARED_FOR_S = 30.0
"""How long after requests of two owners met at a model its batches stay capped by the latency
target: about a translator's pause between verses, so one whose next verse follows a while later
still finds short batches beside another owner's flood. An owner alone gets full batches."""


class BatchCosts:
    """Backend seconds per batch size, measured as the model serves (a moving average per size), and
    the line cost = a + b·n fitted through them by least squares, which predicts sizes not seen."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}

    def observe(self, size: int, seconds: float) -> None:
        known = self.seconds.get(size)
        self.seconds[size] = seconds if known is None else known + COST_SMOOTHING * (seconds - known)

    def line(self) -> tuple[float, float] | None:
        """(a, b): seconds fixed per batch and per request; None until two sizes were measured."""
        if len(self.seconds) < 2:
            return None
        count = len(self.seconds)
        mean_n = sum(self.seconds) / count
        mean_s = sum(self.seconds.values()) / count
        spread = sum((n - mean_n) ** 2 for n in self.seconds)
        slope = sum((n - mean_n) * (s - mean_s) for n, s in self.seconds.items()) / spread
        return mean_s - slope * mean_n, slope

    def cap(self, target_s: float, max_size: int) -> int:
        """The largest batch size predicted to cost at most `target_s` (or `FLAT_COST_RATIO` lone
        requests, if more), between 1 and `max_size`; `max_size` while the cost is unknown or does
        not grow with size."""
        line = self.line()
        if line is None or line[1] <= 0:
            return max_size
        fixed, per_request = line
        budget = max(target_s, FLAT_COST_RATIO * (fixed + per_request))
        return max(1, min(max_size, int((budget - fixed) / per_request)))


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
        weights: Mapping[str, float] | None = None,
        latency_target_ms: float | None = None,
        on_batch: Callable[[int], None] | None = None,
        name: str = "batcher",
    ) -> None:
        """`weights`: owners' and API keys' shares of the batches (`inference_gpu.fair_queue`), read
        at every turn, so changing the mapping takes effect at once. `latency_target_ms`: cap
        batches at the size measured to run within it; None: `max_batch_size` only."""
        if max_batch_size < 1 or concurrency < 1:
            raise ValueError("max_batch_size and concurrency must be at least 1")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000
        self.weights: Mapping[str, float] = weights if weights is not None else {}
        self.latency_target_s = None if latency_target_ms is None else latency_target_ms / 1000
        self.costs = BatchCosts()
        self.latency_cap = max_batch_size
        """The batch size measured to run within the latency target (`max_batch_size` without one)."""
        self._last_owner: str | None = None
        self._shared_until = float("-inf")
        """Until when (loop time) the model counts as shared by owners (`SHARED_FOR_S`)."""
        self.on_batch = on_batch
        self.on_result: BatchObserver[Req, Res] | None = None
        self.stats = BatchStats()
        self._queues: dict[Hashable, FairQueue[_Item[Req, Res]]] = {}
        self._served: dict[Hashable, int] = {}
        """Decoding key → the number of the batch that last served it (`stats.calls` then)."""
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
    def batch_cap(self) -> int:
        """The most requests the next batch takes: `latency_cap` while the model is shared, that is
        while requests of another owner came within `SHARED_FOR_S` (someone may be waiting for a
        bound); otherwise `max_batch_size`, since an owner alone has nobody to be fair to and
        smaller batches would only cost it throughput."""
        if self._loop is not None and self._loop.time() < self._shared_until:
            return self.latency_cap
        return self.max_batch_size

    def _note_owner(self, owner: str, now: float) -> None:
        if owner != self._last_owner:
            if self._last_owner is not None:
                self._shared_until = now + SHARED_FOR_S
            self._last_owner = owner

    @property
    def pending(self) -> int:
        """Requests queued or in a running batch."""
        queued = sum(not item.gone for queue in self._queues.values() for item in queue)
        return queued + len(self._in_flight)

    async def submit(self, request: Req) -> Res:
        if self._closed:
            raise BatcherClosed("the batcher is closed")
        loop = asyncio.get_running_loop()
        self._start(loop)
        assert self._wakeup is not None
        now = loop.time()
        self._note_owner(request.sender.owner, now)
        item: _Item[Req, Res] = _Item(request, loop.create_future(), now)
        queue = self._queues.get(request.key)
        if queue is None:
            queue = self._queues[request.key] = FairQueue(self.weights)
        queue.push(item)
        if self._free > 0 and (len(queue) >= self.batch_cap or self.wait_limit_s == 0):
            # Ready now and a backend call is free: start it here rather than a loop turn later.
            self._launch_ready(loop, now)
        elif len(queue) == 1 or len(queue) >= self.batch_cap:
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
        self._served.clear()
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
        for key, queue in list(self._queues.items()):
            oldest = queue.oldest()
            if oldest is None:
                self._forget(key)
                continue
            if self._flush or len(queue) >= self.batch_cap:
                return 0.0
            wait = max(0.0, oldest + self.wait_limit_s - now)
            soonest = wait if soonest is None else min(soonest, wait)
        return soonest

    def _take(self, now: float) -> list[_Item[Req, Res]]:
        """The next batch: up to `batch_cap` live requests, in their turns (`FairQueue`), of the
        ready queue served least recently; among queues not served since they were last empty,
        the one whose oldest request waited longest."""
        ready: list[tuple[int, float, Hashable]] = []
        for key, queue in self._queues.items():
            oldest = queue.oldest()
            if oldest is not None and (
                self._flush or len(queue) >= self.batch_cap or oldest + self.wait_limit_s <= now
            ):
                ready.append((self._served.get(key, -1), oldest, key))
        if not ready:
            return []
        key = min(ready, key=lambda entry: entry[:2])[2]
        queue = self._queues[key]
        batch = queue.take(self.batch_cap)
        self._served[key] = self.stats.calls
        if not len(queue):
            self._forget(key)
        return batch

    def _forget(self, key: Hashable) -> None:
        """The key's queue is empty: drop it (a key queued again is served as a new one)."""
        del self._queues[key]
        self._served.pop(key, None)

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
            self.costs.observe(len(batch), seconds)
            if self.latency_target_s is not None:
                self.latency_cap = self.costs.cap(self.latency_target_s, self.max_batch_size)
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
