"""The models an inference node holds: fetched from the model store, verified, loaded on demand.

Concurrent requests for one revision share a single load. Every state change (loading, ready,
failed, unloaded) is announced to listeners, which forward it to the API service.

A model is idle when no work item holds it (`hold`/`release`) and its batcher has nothing queued
or running; only idle models are unloaded, whether asked to (`unload` waits for idleness) or to
fit `node.memory_budget_bytes` (least recently used first).

Failures while fetching from the model store:

- The store unreachable (connection refused or dropped, timeouts, throttling, 5xx): the load is
  retried with exponential backoff and jitter for up to `node.load_retry_s`. It stays LOADING, and
  each failed attempt is announced as LOADING with a message saying what failed and when the next
  attempt is; the API service keeps serving the engine's older revision meanwhile. Past the
  budget it is FAILED. Unloading the model or closing the manager abandons the retries.
- A file failing checksum verification: the bad download is discarded and the revision fetched
  once more (a download can be corrupted in transit); if it fails again the load is FAILED and the
  revision is never served. It is not retried further.

The disk cache (`settings.node_cache_dir`, one folder per revision's files) is kept within
`node.cache_budget_bytes`: after each fetch the least recently used copies (last loaded or
unloaded) that no loaded or loading model uses are deleted. Eviction waits until no fetch is in
progress, and a fetch waits for an eviction in progress, so no copy is deleted while a load reads it.

Models that learn segments (`ServedModel.learns_segments`: `smt-transfer`) replay the engine's
trained segments before they are announced READY: the manager asks `segment_source` (the node
asks the API service, `InferenceNodeApi.GetTrainSegments`) and applies them in order. While the API
service cannot be reached the replay is retried like a fetch, for up to `node.load_retry_s`; past
that, or on any other failure, the load is FAILED: a model that silently missed segments is never
served.

A model whose worker process died (`smt-transfer` runs each model in a process of its own; the
model says so with `lost` and calls its `lost_listeners`) is dropped at once and announced
UNLOADED, so the API service no longer counts it as held; the work that met the death is answered
"model unavailable" and the next request loads the revision afresh (replaying trained segments).

`serval_node_model_load_failures{reason}` counts every failed attempt,
`serval_node_model_loads_failed{reason}` the loads that ended FAILED and
`serval_node_model_loads_retrying` the loads waiting for their next attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import re
import shutil
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

from inference_gpu.families import ServedModel, model_class
from inference_gpu.metrics import NodeMetrics
from serval.inference.v1 import node_pb2
from serval_common.manifest import ChecksumMismatch, Manifest, fetch_folder, store_unavailable
from serval_common.redact import redact, secret_values
from serval_common.settings import Settings
from serval_common.store import ModelStore, StoreError

log = logging.getLogger(__name__)

StatusListener = Callable[[node_pb2.ModelStatus], None]
SegmentSource = Callable[[node_pb2.ModelRef], Awaitable[list[node_pb2.TrainSegmentOp]]]
"""The segments trained on an engine since the build of the revision `ModelRef` names, in order."""

IDLE_POLL_S = 0.02


class MemoryBudgetExceeded(RuntimeError):
    """The model does not fit the node's memory budget even after unloading every idle model."""


class SegmentsUnavailable(StoreError):
    """The engine's trained segments could not be fetched, so the model is not served.

    A `StoreError`, so work that waited for the model is answered "model unavailable"."""


class LoadAbandoned(StoreError):
    """The model was unloaded, or the node is closing, while its load waited to retry.

    A `StoreError`, so work that waited for the model is answered "model unavailable"."""


def failure_reason(exc: BaseException) -> str:
    """The `reason` label of a failed load (see `inference_gpu.metrics.LOAD_FAILURE_REASONS`)."""
    if isinstance(exc, ChecksumMismatch):
        return "checksum"
    if isinstance(exc, MemoryBudgetExceeded):
        return "memory"
    if store_unavailable(exc):
        return "store_unavailable"
    return "other"


class ModelManager:
    def __init__(
        self,
        settings: Settings,
        store: ModelStore,
        metrics: NodeMetrics | None = None,
        *,
        segment_source: SegmentSource | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.segment_source = segment_source
        self._secrets = secret_values(settings)
        self._models: dict[str, ServedModel] = {}
        self._loading: dict[str, asyncio.Task[ServedModel]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        """Location → set to abandon that load's retries (unload, close)."""
        self._failed: set[str] = set()
        """Locations whose last load ended FAILED."""
        self._refs: dict[str, node_pb2.ModelRef] = {}
        self._sizes: dict[str, int] = {}
        self._last_used: dict[str, float] = {}
        self._holds: Counter[str] = Counter()
        self._folders: dict[str, Path] = {}
        """Location → its copy in the disk cache, for every model loaded or being loaded."""
        self._fetching = 0
        self._cache_lock = asyncio.Lock()
        self._lost_drops: set[asyncio.Task[None]] = set()
        self.listeners: list[StatusListener] = []

    def loaded(self) -> list[str]:
        return list(self._models)

    def hold(self, location: str) -> None:
        """A work item for `location` is in flight: the model must not be unloaded."""
        self._holds[location] += 1

    def release(self, location: str) -> None:
        self._holds[location] -= 1
        if self._holds[location] <= 0:
            del self._holds[location]

    def is_idle(self, location: str) -> bool:
        model = self._models.get(location)
        return not self._holds[location] and (model is None or model.pending == 0)

    def statuses(self) -> list[node_pb2.ModelStatus]:
        return [
            node_pb2.ModelStatus(
                model=self._refs[loc], state=node_pb2.MODEL_STATE_READY, size_bytes=m.size_bytes
            )
            for loc, m in self._models.items()
        ]

    async def get(self, ref: node_pb2.ModelRef) -> ServedModel:
        self._last_used[ref.location] = time.monotonic()
        model = self._models.get(ref.location)
        if self.metrics is not None:
            (self.metrics.cache_misses if model is None else self.metrics.cache_hits).inc()
        if model is not None and _lost(model):
            await self._drop_lost(ref.location, model)
            model = None
        if model is not None:
            return model
        location = ref.location
        task = self._loading.get(location)
        if task is None:
            stop = asyncio.Event()
            task = asyncio.create_task(self._load(ref, stop))
            self._loading[location] = task
            self._stops[location] = stop

            def forget(done: asyncio.Task[ServedModel]) -> None:
                if self._loading.get(location) is done:
                    del self._loading[location]
                    self._stops.pop(location, None)

            task.add_done_callback(forget)
        return await asyncio.shield(task)

    async def _load(self, ref: node_pb2.ModelRef, stop: asyncio.Event) -> ServedModel:
        self._refs[ref.location] = ref
        self._failed.discard(ref.location)
        self._announce(ref, node_pb2.MODEL_STATE_LOADING)
        started = time.perf_counter()
        try:
            async with self._cache_lock:
                self._fetching += 1
            try:
                manifest, folder = await self._fetch(ref, stop)
                self._folders[ref.location] = folder
                await asyncio.to_thread(_touch, folder)
            finally:
                self._fetching -= 1
            await self._trim_cache()
            fetch_s = time.perf_counter() - started
            if self.metrics is not None:
                self.metrics.fetch_time.observe(fetch_s)
            size = await asyncio.to_thread(_folder_size, folder)
            await self._make_room(ref.location, size)
            self._sizes[ref.location] = size
            model = await asyncio.to_thread(
                model_class(manifest.backend).load, folder, manifest, self.settings.node
            )
            if model.learns_segments:
                try:
                    await self._replay(ref, model, stop)
                except BaseException:
                    await model.close(drain=False)
                    raise
        except LoadAbandoned:
            self._sizes.pop(ref.location, None)
            self._folders.pop(ref.location, None)
            log.info("model load abandoned while retrying", extra={"model": ref.location})
            self._announce(ref, node_pb2.MODEL_STATE_UNLOADED)
            raise
        except Exception as exc:
            self._sizes.pop(ref.location, None)
            self._folders.pop(ref.location, None)
            reason = failure_reason(exc)
            if self.metrics is not None:
                self.metrics.load_failures.labels(reason=reason).inc()
                self.metrics.loads_failed.labels(reason=reason).inc()
            log.error("model load failed", extra={"model": ref.location, "reason": reason, "error": str(exc)})
            self._failed.add(ref.location)
            self._announce(ref, node_pb2.MODEL_STATE_FAILED, str(exc))
            raise
        self._models[ref.location] = model
        lost_listeners: list[Callable[[], None]] | None = getattr(model, "lost_listeners", None)
        if lost_listeners is not None:
            lost_listeners.append(functools.partial(self._on_lost, ref.location, model))
        load_s = time.perf_counter() - started
        if self.metrics is not None:
            model.observe_with(self.metrics)
            self.metrics.load_time.observe(load_s)
            self.metrics.revisions_loaded.set(len(self._models))
        log.info(
            "model ready",
            extra={"model": ref.location, "load_s": round(load_s, 3), "fetch_s": round(fetch_s, 3)},
        )
        self._announce(ref, node_pb2.MODEL_STATE_READY, size_bytes=model.size_bytes)
        return model

    async def _fetch(self, ref: node_pb2.ModelRef, stop: asyncio.Event) -> tuple[Manifest, Path]:
        """A verified local copy of the revision, retrying while the model store is unreachable
        (for up to `node.load_retry_s`) and fetching once more after a checksum failure."""
        node = self.settings.node
        location = ref.location
        deadline = time.monotonic() + node.load_retry_s
        delay = node.load_retry_initial_s
        attempt = 0
        refetched = False
        retrying = False
        try:
            while True:
                attempt += 1
                try:
                    return await asyncio.to_thread(
                        functools.partial(fetch_folder, with_checkpoint=False),
                        self.store,
                        location,
                        self.settings.node_cache_dir,
                    )
                except ChecksumMismatch as exc:
                    if refetched:
                        raise ChecksumMismatch(
                            f"{exc}; it failed again when fetched once more, so this revision is not served",
                            exc.key,
                        ) from exc
                    refetched = True
                    self._count_failed_attempt("checksum")
                    log.warning(
                        "model file failed checksum verification; fetching it once more",
                        extra={"model": location, "file": exc.key, "error": str(exc)},
                    )
                    self._announce(ref, node_pb2.MODEL_STATE_LOADING, f"{exc}; fetching it once more")
                    continue
                except Exception as exc:
                    if not store_unavailable(exc):
                        raise
                    if stop.is_set():
                        raise LoadAbandoned(f"the load of {location} was abandoned") from exc
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise StoreError(
                            f"the model store was unreachable for {node.load_retry_s:g} s "
                            f"({attempt} attempts): {exc}"
                        ) from exc
                    wait = min(delay * random.uniform(0.5, 1.5), node.load_retry_max_s, remaining)
                    delay = min(delay * 2, node.load_retry_max_s)
                    self._count_failed_attempt("store_unavailable")
                    if not retrying and self.metrics is not None:
                        self.metrics.loads_retrying.inc()
                    retrying = True
                    at = datetime.now(UTC) + timedelta(seconds=wait)
                    log.warning(
                        "model store unavailable while loading; retrying",
                        extra={
                            "model": location,
                            "attempt": attempt,
                            "retry_in_s": round(wait, 2),
                            "error": str(exc),
                        },
                    )
                    self._announce(
                        ref,
                        node_pb2.MODEL_STATE_LOADING,
                        f"model store unavailable (attempt {attempt}): {exc}; "
                        f"next attempt in {wait:.1f} s, at {at:%H:%M:%S} UTC",
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), wait)
                    if stop.is_set():
                        raise LoadAbandoned(f"the load of {location} was abandoned while retrying") from exc
        finally:
            if retrying and self.metrics is not None:
                self.metrics.loads_retrying.dec()

    async def _replay(self, ref: node_pb2.ModelRef, model: ServedModel, stop: asyncio.Event) -> None:
        """Apply the engine's trained segments to a freshly loaded model, retrying while the API
        service is unreachable (see the module docstring)."""
        if self.segment_source is None:
            raise SegmentsUnavailable(
                f"{ref.location} learns trained segments but this node has no API service to fetch them from"
            )
        node = self.settings.node
        deadline = time.monotonic() + node.load_retry_s
        delay = node.load_retry_initial_s
        attempt = 0
        while True:
            attempt += 1
            try:
                segments = await self.segment_source(ref)
                break
            except Exception as exc:
                remaining = deadline - time.monotonic()
                if not _retryable(exc) or remaining <= 0 or stop.is_set():
                    raise SegmentsUnavailable(
                        f"the trained segments of {ref.location} could not be fetched ({attempt} attempts): {exc}"
                    ) from exc
                wait = min(delay * random.uniform(0.5, 1.5), node.load_retry_max_s, remaining)
                delay = min(delay * 2, node.load_retry_max_s)
                log.warning(
                    "trained segments unavailable while loading; retrying",
                    extra={
                        "model": ref.location,
                        "attempt": attempt,
                        "retry_in_s": round(wait, 2),
                        "error": str(exc),
                    },
                )
                self._announce(
                    ref,
                    node_pb2.MODEL_STATE_LOADING,
                    f"trained segments unavailable (attempt {attempt}): {exc}; next attempt in {wait:.1f} s",
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
        for segment in segments:
            await model.train_segment(
                segment.source_segment, segment.target_segment, segment.sentence_start, segment.seq
            )
        if segments:
            log.info("trained segments replayed", extra={"model": ref.location, "segments": len(segments)})

    def _count_failed_attempt(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.load_failures.labels(reason=reason).inc()

    async def unload(self, ref: node_pb2.ModelRef) -> None:
        """Unload once idle: work already routed to the model finishes first. A load in progress
        is abandoned if it is waiting to retry, else awaited (its current attempt finishes). A
        revision whose load failed is announced UNLOADED, so the API service forgets the failure."""
        loading = self._loading.get(ref.location)
        if loading is not None:
            stop = self._stops.get(ref.location)
            if stop is not None:
                stop.set()
            with contextlib.suppress(Exception):
                await asyncio.shield(loading)
        while ref.location in self._models and not self.is_idle(ref.location):
            await asyncio.sleep(IDLE_POLL_S)
        if ref.location in self._failed and ref.location not in self._loading:
            # Nothing is held, but the API service still records the failure: clear it.
            self._failed.discard(ref.location)
            self._announce(ref, node_pb2.MODEL_STATE_UNLOADED)
        await self._drop(ref.location)

    async def _drop(self, location: str) -> None:
        model = self._models.pop(location, None)
        self._sizes.pop(location, None)
        folder = self._folders.pop(location, None)
        if folder is not None:
            await asyncio.to_thread(_touch, folder)
        if model is None:
            return
        if self.metrics is not None:
            self.metrics.revisions_loaded.set(len(self._models))
        await model.close()
        log.info("model unloaded", extra={"model": location})
        self._announce(self._refs[location], node_pb2.MODEL_STATE_UNLOADED)

    def _on_lost(self, location: str, model: ServedModel) -> None:
        """Called by a model whose worker died, on the event loop: drop it without waiting."""
        task = asyncio.get_running_loop().create_task(self._drop_lost(location, model))
        self._lost_drops.add(task)
        task.add_done_callback(self._lost_drops.discard)

    async def _drop_lost(self, location: str, model: ServedModel) -> None:
        """Forget a model whose worker died (if it is still the one loaded) and announce it
        UNLOADED: the next request for the revision loads it again."""
        if self._models.get(location) is not model:
            return
        del self._models[location]
        self._sizes.pop(location, None)
        self._folders.pop(location, None)
        if self.metrics is not None:
            self.metrics.revisions_loaded.set(len(self._models))
        log.error(
            "model lost its worker process: dropped, it reloads on the next request",
            extra={"model": location},
        )
        self._announce(
            self._refs[location],
            node_pb2.MODEL_STATE_UNLOADED,
            "the model's worker process died; it is loaded again on the next request",
        )
        await model.close(drain=False)

    async def _make_room(self, location: str, size: int) -> None:
        """Unload least recently used idle models until `size` more bytes fit the budget."""
        budget = self.settings.node.memory_budget_bytes
        if budget <= 0:
            return
        while True:
            used = sum(s for loc, s in self._sizes.items() if loc != location)
            if used + size <= budget:
                return
            idle = [loc for loc in self._models if loc != location and self.is_idle(loc)]
            if not idle:
                busy = ", ".join(sorted(loc for loc in self._sizes if loc != location)) or "none"
                raise MemoryBudgetExceeded(
                    f"model {location} needs {size} bytes but the node's memory budget is {budget} "
                    f"bytes with {used} bytes held by models in use ({busy})"
                )
            victim = min(idle, key=lambda loc: self._last_used.get(loc, 0.0))
            log.info("unloading least recently used model to fit the memory budget", extra={"model": victim})
            if self.metrics is not None:
                self.metrics.evictions.inc()
            await self._drop(victim)

    def cached(self) -> list[Path]:
        """The revisions' copies in the disk cache, least recently used first."""
        return [entry.path for entry in _cache_entries(self.settings.node_cache_dir)]

    async def _trim_cache(self) -> None:
        """Delete the least recently used cached copies no model loaded or loading uses, until the
        cache fits `node.cache_budget_bytes`; the last of concurrent fetches to finish does it."""
        budget = self.settings.node.cache_budget_bytes
        if budget <= 0:
            return
        async with self._cache_lock:
            if self._fetching:
                return
            in_use = set(self._folders.values())
            evicted, left = await asyncio.to_thread(trim_cache, self.settings.node_cache_dir, budget, in_use)
        for path, size in evicted:
            log.info(
                "deleted a cached model copy to fit the disk cache budget",
                extra={"folder": str(path), "size_bytes": size, "budget_bytes": budget},
            )
        if left > budget:
            log.warning(
                "the disk cache holds more than its budget in models in use",
                extra={"cached_bytes": left, "budget_bytes": budget},
            )

    async def close(self) -> None:
        """Abandon loads in progress, then close every model."""
        for stop in self._stops.values():
            stop.set()
        loading = list(self._loading.values())
        for task in loading:
            task.cancel()
        await asyncio.gather(*loading, return_exceptions=True)
        for model in self._models.values():
            await model.close()
        self._models.clear()

    def _announce(self, ref: node_pb2.ModelRef, state: int, message: str = "", size_bytes: int = 0) -> None:
        """The message travels to every API replica and on to admins: store URLs, paths and
        credentials are masked (the log keeps them)."""
        message = redact(message, self._secrets)
        status = node_pb2.ModelStatus(model=ref, state=state, message=message, size_bytes=size_bytes)  # type: ignore[arg-type]
        for listener in self.listeners:
            listener(status)


def _lost(model: ServedModel) -> bool:
    """Whether the model's worker process died (families that run one say so with `lost`)."""
    return bool(getattr(model, "lost", False))


def _retryable(exc: BaseException) -> bool:
    """Whether fetching trained segments may succeed later: the API service unreachable or
    overloaded, not a refusal."""
    if isinstance(exc, grpc.RpcError):
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        return code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
    return isinstance(exc, ConnectionError | TimeoutError)


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _touch(folder: Path) -> None:
    """Mark a cached copy used now: its folder's modification time orders the cache's eviction."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(folder)


_COPY_NAME = re.compile(r"[0-9a-f]{16}")
"""A cached copy's folder: `{cache_dir}/{store prefix}/{digest of its file list}` (`fetch_folder`)."""


class _CacheEntry:
    __slots__ = ("path", "size", "used")

    def __init__(self, path: Path, size: int, used: float) -> None:
        self.path, self.size, self.used = path, size, used


def _cache_entries(cache_dir: Path) -> list[_CacheEntry]:
    entries: list[_CacheEntry] = []
    for folder, subfolders, _ in os.walk(cache_dir):
        copies = [name for name in subfolders if _COPY_NAME.fullmatch(name)]
        for name in copies:
            path = Path(folder) / name
            with contextlib.suppress(FileNotFoundError):
                entries.append(_CacheEntry(path, _folder_size(path), path.stat().st_mtime))
        subfolders[:] = [name for name in subfolders if name not in copies and not name.startswith(".")]
    return sorted(entries, key=lambda entry: entry.used)


def trim_cache(cache_dir: Path, budget: int, in_use: set[Path]) -> tuple[list[tuple[Path, int]], int]:
    """Blocking: delete the least recently used copies not `in_use` until at most `budget` bytes are
    cached. The copies deleted with their sizes, and the bytes left."""
    entries = _cache_entries(cache_dir)
    total = sum(entry.size for entry in entries)
    evicted: list[tuple[Path, int]] = []
    for entry in entries:
        if total <= budget:
            break
        if entry.path in in_use:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        total -= entry.size
        evicted.append((entry.path, entry.size))
        _remove_empty_parents(entry.path.parent, cache_dir)
    return evicted, total


def _remove_empty_parents(folder: Path, cache_dir: Path) -> None:
    while folder != cache_dir and folder.is_relative_to(cache_dir):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
