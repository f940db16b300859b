"""Reading a revision's files from the model store for `inference_gpu.model_manager.ModelManager`:
learning a revision's weights and fetching its files (`StoreFetcher.resolve`, `fetch`), the
retries around each read, and the disk cache of fetched copies (`StoreFetcher.cached`,
`trim_cache`). The manager holds one `StoreFetcher`, handed the announcer to report retries to and
what the node holds (whose folders the disk cache keeps).

Failures while reading from the model store:

- The store unreachable (connection refused or dropped, timeouts, throttling, 5xx): the read is
  retried with exponential backoff and jitter for up to `node.load_retry_s`. The revision stays
  LOADING, and each failed attempt is announced as LOADING with a message saying what failed and
  when the next attempt is; the API service keeps serving the engine's older revision meanwhile.
  Past the budget it is FAILED. Unloading the revision (the last one waiting for those weights) or
  closing the manager abandons the retries.
- A file failing checksum verification: the bad download is discarded and the files fetched once
  more (a download can be corrupted in transit); if it fails again the load is FAILED and the
  revision is never served. It is not retried further.

The disk cache (`settings.node_cache_dir`, `inference_gpu.disk_cache`) is kept within
`node.cache_budget_bytes`: after each fetch the least recently used copies that no loaded or
loading model uses are deleted. Eviction waits until no fetch is in progress, and a fetch waits for
an eviction in progress, so no copy is deleted while a load reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from inference_gpu.disk_cache import cache_entries, touch, trim_cache
from inference_gpu.held_models import HeldModels
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_status import StatusAnnouncer
from serval.inference.v1 import node_pb2
from serval_common.manifest import (
    ChecksumMismatch,
    Manifest,
    ResolvedRevision,
    fetch_folder,
    resolve_revision,
    store_unavailable,
)
from serval_common.settings import Settings
from serval_common.store import ModelStore, StoreError

log = logging.getLogger("inference_gpu.model_manager")
"""The model manager's logger: these records are the manager's."""

T = TypeVar("T")


class LoadAbandoned(StoreError):
    """The revision was unloaded, or the node is closing, while its load waited to retry.

    A `StoreError`, so work that waited for the model is answered "model unavailable"."""


RefsToTell = list[node_pb2.ModelRef] | Callable[[], list[node_pb2.ModelRef]]
"""The revisions a failed attempt is announced to (a callable: read again at each attempt)."""


class StoreFetcher:
    """The model manager's reads from the model store and its disk cache."""

    def __init__(
        self,
        settings: Settings,
        store: ModelStore,
        held: HeldModels,
        announcer: StatusAnnouncer,
        metrics: NodeMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self._held = held
        self._announcer = announcer
        self.metrics = metrics
        self._fetching = 0
        self._cache_lock = asyncio.Lock()

    async def resolve(self, ref: node_pb2.ModelRef, stop: asyncio.Event) -> ResolvedRevision:
        """The revision's manifests and weights, retried while the store is unreachable."""
        return await self._retrying(
            [ref], stop, functools.partial(resolve_revision, self.store, ref.location)
        )

    async def fetch(
        self, refs: RefsToTell, stop: asyncio.Event, ref: node_pb2.ModelRef, resolved: ResolvedRevision
    ) -> tuple[Manifest, Path]:
        """The revision's files in the disk cache (fetched unless a verified copy is there), retried
        while the store is unreachable and once more after a checksum failure. Call it within
        `fetching()`, and trim the cache after."""
        manifest, folder = await self._retrying(
            refs,
            stop,
            functools.partial(
                fetch_folder,
                self.store,
                ref.location,
                self.settings.node_cache_dir,
                with_checkpoint=False,
                resolved=resolved,
            ),
            refetch_on_checksum=True,
        )
        await asyncio.to_thread(touch, folder)
        return manifest, folder

    @contextlib.asynccontextmanager
    async def fetching(self) -> AsyncIterator[None]:
        """A fetch in progress: the disk cache is not trimmed meanwhile (`trim_cache`). The folder
        fetched must be in `HeldModels.folders_in_use` before it ends."""
        async with self._cache_lock:
            self._fetching += 1
        try:
            yield
        finally:
            self._fetching -= 1

    async def _retrying(
        self,
        refs: RefsToTell,
        stop: asyncio.Event,
        read: Callable[[], T],
        *,
        refetch_on_checksum: bool = False,
    ) -> T:
        """`read` in a worker thread, retried while the model store is unreachable (for up to
        `node.load_retry_s`, each failed attempt announced to `refs` as LOADING) and, with
        `refetch_on_checksum`, once more after a checksum failure."""
        node = self.settings.node
        deadline = time.monotonic() + node.load_retry_s
        delay = node.load_retry_initial_s
        attempt = 0
        refetched = False
        retrying = False

        def announce(message: str) -> None:
            for ref in refs() if callable(refs) else refs:
                self._announcer.announce(ref, node_pb2.MODEL_STATE_LOADING, message)

        try:
            while True:
                attempt += 1
                try:
                    return await asyncio.to_thread(read)
                except ChecksumMismatch as exc:
                    if refetched or not refetch_on_checksum:
                        raise ChecksumMismatch(
                            f"{exc}; it failed again when fetched once more, so this revision is not served",
                            exc.key,
                        ) from exc
                    refetched = True
                    self.count_failed_attempt("checksum")
                    log.warning(
                        "model file failed checksum verification; fetching it once more",
                        extra={"file": exc.key, "error": str(exc)},
                    )
                    announce(f"{exc}; fetching it once more")
                    continue
                except Exception as exc:
                    if not store_unavailable(exc):
                        raise
                    if stop.is_set():
                        raise LoadAbandoned("the load was abandoned") from exc
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise StoreError(
                            f"the model store was unreachable for {node.load_retry_s:g} s "
                            f"({attempt} attempts): {exc}"
                        ) from exc
                    wait = min(delay * random.uniform(0.5, 1.5), node.load_retry_max_s, remaining)
                    delay = min(delay * 2, node.load_retry_max_s)
                    self.count_failed_attempt("store_unavailable")
                    if not retrying and self.metrics is not None:
                        self.metrics.loads_retrying.inc()
                    retrying = True
                    at = datetime.now(UTC) + timedelta(seconds=wait)
                    log.warning(
                        "model store unavailable while loading; retrying",
                        extra={"attempt": attempt, "retry_in_s": round(wait, 2), "error": str(exc)},
                    )
                    announce(
                        f"model store unavailable (attempt {attempt}): {exc}; "
                        f"next attempt in {wait:.1f} s, at {at:%H:%M:%S} UTC"
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), wait)
                    if stop.is_set():
                        raise LoadAbandoned("the load was abandoned while retrying") from exc
        finally:
            if retrying and self.metrics is not None:
                self.metrics.loads_retrying.dec()

    def count_failed_attempt(self, reason: str) -> None:
        """`serval_node_model_load_failures{reason}`: every failed attempt to load, here or not."""
        if self.metrics is not None:
            self.metrics.load_failures.labels(reason=reason).inc()

    def cached(self) -> list[Path]:
        """The copies in the disk cache, least recently used first."""
        return [entry.path for entry in cache_entries(self.settings.node_cache_dir)]

    async def trim_cache(self) -> None:
        """Delete the least recently used cached copies no model loaded or loading uses, until the
        cache fits `node.cache_budget_bytes`; the last of concurrent fetches to finish does it."""
        budget = self.settings.node.cache_budget_bytes
        if budget <= 0:
            return
        async with self._cache_lock:
            if self._fetching:
                return
            in_use = self._held.folders_in_use()
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
