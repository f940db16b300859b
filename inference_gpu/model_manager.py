"""The models an inference node holds: fetched from the model store, verified, loaded on demand.

Concurrent requests for one revision share a single load. Every state change (loading, ready,
failed, unloaded) is announced to listeners, which forward it to the API service.

A model is idle when no work item holds it (`hold`/`release`) and its batcher has nothing queued
or running; only idle models are unloaded, whether asked to (`unload` waits for idleness) or to
fit `node.memory_budget_bytes` (least recently used first).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from inference_gpu.engine import LoadedModel
from inference_gpu.metrics import NodeMetrics
from serval.inference.v1 import node_pb2
from serval_common.manifest import fetch_folder
from serval_common.settings import Settings
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

StatusListener = Callable[[node_pb2.ModelStatus], None]

IDLE_POLL_S = 0.02


class MemoryBudgetExceeded(RuntimeError):
    """The model does not fit the node's memory budget even after unloading every idle model."""


class ModelManager:
    def __init__(self, settings: Settings, store: ModelStore, metrics: NodeMetrics | None = None) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self._models: dict[str, LoadedModel] = {}
        self._loading: dict[str, asyncio.Task[LoadedModel]] = {}
        self._refs: dict[str, node_pb2.ModelRef] = {}
        self._sizes: dict[str, int] = {}
        self._last_used: dict[str, float] = {}
        self._holds: Counter[str] = Counter()
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
        return not self._holds[location] and (model is None or model.batcher.pending == 0)

    def statuses(self) -> list[node_pb2.ModelStatus]:
        return [
            node_pb2.ModelStatus(
                model=self._refs[loc], state=node_pb2.MODEL_STATE_READY, size_bytes=m.size_bytes
            )
            for loc, m in self._models.items()
        ]

    async def get(self, ref: node_pb2.ModelRef) -> LoadedModel:
        self._last_used[ref.location] = time.monotonic()
        model = self._models.get(ref.location)
        if self.metrics is not None:
            (self.metrics.cache_misses if model is None else self.metrics.cache_hits).inc()
        if model is not None:
            return model
        task = self._loading.get(ref.location)
        if task is None:
            task = asyncio.create_task(self._load(ref))
            self._loading[ref.location] = task
            task.add_done_callback(lambda _: self._loading.pop(ref.location, None))
        return await asyncio.shield(task)

    async def _load(self, ref: node_pb2.ModelRef) -> LoadedModel:
        self._refs[ref.location] = ref
        self._announce(ref, node_pb2.MODEL_STATE_LOADING)
        started = time.perf_counter()
        try:
            manifest, folder = await asyncio.to_thread(
                functools.partial(fetch_folder, with_checkpoint=False),
                self.store,
                ref.location,
                self.settings.node_cache_dir,
            )
            size = await asyncio.to_thread(_folder_size, folder)
            await self._make_room(ref.location, size)
            self._sizes[ref.location] = size
            model = await asyncio.to_thread(LoadedModel.load, folder, manifest, self.settings.node)
        except Exception as exc:
            self._sizes.pop(ref.location, None)
            log.error("model load failed", extra={"model": ref.location, "error": str(exc)})
            self._announce(ref, node_pb2.MODEL_STATE_FAILED, str(exc))
            raise
        self._models[ref.location] = model
        load_s = time.perf_counter() - started
        if self.metrics is not None:
            model.batcher.on_result = self.metrics.observe_batch
            self.metrics.load_time.observe(load_s)
            self.metrics.revisions_loaded.set(len(self._models))
        log.info("model ready", extra={"model": ref.location, "load_s": round(load_s, 3)})
        self._announce(ref, node_pb2.MODEL_STATE_READY, size_bytes=model.size_bytes)
        return model

    async def unload(self, ref: node_pb2.ModelRef) -> None:
        """Unload once idle: work already routed to the model finishes first."""
        loading = self._loading.get(ref.location)
        if loading is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(loading)
        while ref.location in self._models and not self.is_idle(ref.location):
            await asyncio.sleep(IDLE_POLL_S)
        await self._drop(ref.location)

    async def _drop(self, location: str) -> None:
        model = self._models.pop(location, None)
        self._sizes.pop(location, None)
        if model is None:
            return
        if self.metrics is not None:
            self.metrics.revisions_loaded.set(len(self._models))
        await model.close()
        log.info("model unloaded", extra={"model": location})
        self._announce(self._refs[location], node_pb2.MODEL_STATE_UNLOADED)

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

    async def close(self) -> None:
        for model in self._models.values():
            await model.close()
        self._models.clear()

    def _announce(self, ref: node_pb2.ModelRef, state: int, message: str = "", size_bytes: int = 0) -> None:
        status = node_pb2.ModelStatus(model=ref, state=state, message=message, size_bytes=size_bytes)  # type: ignore[arg-type]
        for listener in self.listeners:
            listener(status)


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
