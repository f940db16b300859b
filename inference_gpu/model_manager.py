"""The models an inference node holds: fetched from the model store, verified, loaded on demand.

A loaded model is keyed by the weights it holds, not by the revision that named it
(`inference_gpu.loaded_model`): every revision whose manifest resolves to weights the node holds
is an alias of that one `LoadedModel`, added without a load. A revision the node has not seen
costs two small manifest reads to learn its weights, or none when the API service sent them with
the work (`ModelRef.weights`). Concurrent requests for one set of weights share a single load.
Every state change of a revision (loading, ready, failed, unloaded) is announced to listeners,
which forward it to the API service.

A model is idle when no work item holds any of its revisions (`hold`/`release`) and its batcher has
nothing queued or running. `unload(revision)` removes one alias once the work routed to it is done,
and unloads the model when its last alias goes; the memory budget (`node.memory_budget_bytes`)
counts each loaded model once and unloads least recently used idle models, with all their aliases,
to make room.

Reads from the model store are retried, and fetched copies kept in a disk cache within its
budget, as `inference_gpu.store_fetch` (`StoreFetching`, which `ModelManager` inherits) describes.

A model that learns segments (`ServedModel.learns_segments`) replays the engine's trained segments
before it is announced READY, and learns pushed pairs and catches up while loaded:
`inference_gpu.trained_segments` (`TrainedSegments`, whose `learn` and `catch_up` `ModelManager`
has) describes how.

The memory budget counts what each model holds (`ServedModel.size_bytes`, read again whenever it
is counted): an NMT model's files, an `smt-transfer` model's worker process's resident memory,
which grows as it learns. Before a load the family's estimate is set aside
(`ServedModel.estimated_bytes`); a model found larger once loaded has more idle models unloaded.

A model whose worker process died (`smt-transfer` runs each model in a process of its own; the
model says so with `lost` and calls its `lost_listeners`) is dropped at once and its revisions
announced UNLOADED, so the API service no longer counts them as held; the work that met the death
is answered "model unavailable" and the next request loads the revision afresh (replaying trained
segments).

`serval_node_model_load_failures{reason}` counts every failed attempt,
`serval_node_model_loads_failed{reason}` the revisions whose load ended FAILED and
`serval_node_model_loads_retrying` the loads waiting for their next attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inference_gpu.disk_cache import folder_size, touch, trim_cache
from inference_gpu.families import ServedModel, model_class
from inference_gpu.loaded_model import LoadedModel, model_lost
from inference_gpu.metrics import NodeMetrics
from inference_gpu.store_fetch import LoadAbandoned, StoreFetching
from inference_gpu.trained_segments import ModelNotLoaded, SegmentSource, SegmentsUnavailable, TrainedSegments
from serval.inference.v1 import node_pb2
from serval_common.manifest import (
    ChecksumMismatch,
    Manifest,
    ResolvedRevision,
    fetch_folder,
    resolve_revision,
    store_unavailable,
)
from serval_common.model_revision import short_weights
from serval_common.redact import redact, secret_values
from serval_common.settings import Settings
from serval_common.store import ModelStore

log = logging.getLogger(__name__)


StatusListener = Callable[[node_pb2.ModelStatus], None]

IDLE_POLL_S = 0.02


class MemoryBudgetExceeded(RuntimeError):
    """The model does not fit the node's memory budget even after unloading every idle model."""


def failure_reason(exc: BaseException) -> str:
    """The `reason` label of a failed load (see `inference_gpu.metrics.LOAD_FAILURE_REASONS`)."""
    if isinstance(exc, ChecksumMismatch):
        return "checksum"
    if isinstance(exc, MemoryBudgetExceeded):
        return "memory"
    if store_unavailable(exc):
        return "store_unavailable"
    return "other"


@dataclass
class _Join:
    """A revision on its way to an alias: its weights being learned, then loaded or joined."""

    task: asyncio.Task[ServedModel]
    stop: asyncio.Event


class ModelManager(TrainedSegments, StoreFetching):
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
        self._models: dict[str, LoadedModel] = {}
        """Weights → the loaded model (ready or loading)."""
        self._aliases: dict[str, LoadedModel] = {}
        """Revision location → the loaded model serving it (ready or loading)."""
        self._joins: dict[str, _Join] = {}
        """Revision location → its load in progress."""
        self._failed: set[str] = set()
        """Revision locations whose last load ended FAILED."""
        self._holds: Counter[str] = Counter()
        """Revision location → work items in flight for it."""
        self._fetching = 0
        self._cache_lock = asyncio.Lock()
        self._lost_drops: set[asyncio.Task[None]] = set()
        self.listeners: list[StatusListener] = []

    # ---- what the node holds ---------------------------------------------------------------

    def loaded(self) -> list[str]:
        """The revisions served by a ready model, in the order their models loaded."""
        return [location for model in self._ready() for location in model.aliases]

    def loaded_models(self) -> list[LoadedModel]:
        """The ready models, each set of weights once."""
        return self._ready()

    def folder_of(self, location: str) -> Path | None:
        """The disk cache copy serving a revision (None when it is not loaded)."""
        model = self._aliases.get(location)
        return None if model is None else model.folder

    def bytes_held(self) -> int:
        """Memory the loaded models take, each set of weights counted once."""
        return sum(self._size(model) for model in self._models.values() if model.ready)

    @staticmethod
    def _size(loaded: LoadedModel) -> int:
        """What the model holds now, as its family counts it (an `smt-transfer` worker process's
        resident memory grows as it learns); the estimate while it loads."""
        if loaded.model is not None:
            with contextlib.suppress(Exception):
                size = loaded.model.size_bytes
                if size > 0:
                    loaded.size = size
        return loaded.size

    def hold(self, location: str) -> None:
        """A work item for the revision at `location` is in flight: its model must not be unloaded."""
        self._holds[location] += 1

    def release(self, location: str) -> None:
        self._holds[location] -= 1
        if self._holds[location] <= 0:
            del self._holds[location]

    def statuses(self) -> list[node_pb2.ModelStatus]:
        """READY for every revision a ready model serves (each with the model's size and weights,
        and what a learning model has learned up to)."""
        return [
            node_pb2.ModelStatus(
                model=ref,
                state=node_pb2.MODEL_STATE_READY,
                size_bytes=self._size(model),
                trained_through=model.trained_through,
            )
            for model in self._ready()
            for ref in model.aliases.values()
        ]

    def trained_through(self, location: str) -> int | None:
        """The pair number the revision's ready model has learned up to; None when it learns none."""
        model = self._aliases.get(location)
        return None if model is None or not model.ready else model.trained_through

    def _ready(self) -> list[LoadedModel]:
        return [model for model in self._models.values() if model.ready]

    def _idle(self, model: LoadedModel) -> bool:
        busy = model.model is not None and model.model.pending > 0
        return not busy and not any(self._holds[location] for location in model.aliases)

    # ---- getting a revision's model --------------------------------------------------------

    async def get(self, ref: node_pb2.ModelRef) -> ServedModel:
        """The model serving `ref`: at once when it or its weights are loaded, else after its load."""
        location = ref.location
        loaded = self._aliases.get(location)
        if loaded is None and ref.weights:
            shared = self._models.get(ref.weights)
            if shared is not None and shared.model is not None and not model_lost(shared.model):
                self._alias(shared, ref)
                loaded = shared
        if loaded is not None and loaded.model is not None:
            if model_lost(loaded.model):
                await self._drop_lost(loaded, loaded.model)
            else:
                loaded.touch()
                if self.metrics is not None:
                    self.metrics.cache_hits.inc()
                return loaded.model
        if self.metrics is not None:
            self.metrics.cache_misses.inc()
        join = self._joins.get(location)
        if join is None:
            stop = asyncio.Event()
            join = _Join(asyncio.create_task(self._join(ref, stop)), stop)
            self._joins[location] = join

            def forget(done: asyncio.Task[ServedModel]) -> None:
                current = self._joins.get(location)
                if current is not None and current.task is done:
                    del self._joins[location]

            join.task.add_done_callback(forget)
        return await asyncio.shield(join.task)

    def _alias(self, model: LoadedModel, ref: node_pb2.ModelRef) -> None:
        """Serve the revision `ref` with `model` (ready): no load, announced READY at once."""
        ref = _with_weights(ref, model.weights)
        model.aliases[ref.location] = ref
        self._aliases[ref.location] = model
        self._failed.discard(ref.location)
        model.touch()
        self._count_models()
        log.info(
            "revision served by a loaded model",
            extra={"model": ref.location, "engine_id": ref.engine_id, "weights": model.name},
        )
        self._announce(
            ref,
            node_pb2.MODEL_STATE_READY,
            size_bytes=self._size(model),
            trained_through=model.trained_through,
        )

    async def _join(self, ref: node_pb2.ModelRef, stop: asyncio.Event) -> ServedModel:
        """Learn the revision's weights, then load them or join the model that holds or loads them."""
        location = ref.location
        self._failed.discard(location)
        self._announce(ref, node_pb2.MODEL_STATE_LOADING)
        joined = False
        try:
            resolved: ResolvedRevision | None = None
            weights = ref.weights
            if not weights or weights not in self._models:
                resolved = await self._retrying(
                    [ref], stop, functools.partial(resolve_revision, self.store, location)
                )
                weights = resolved.weights
            ref = _with_weights(ref, weights)
            loaded = self._models.get(weights)
            if loaded is not None and loaded.model is not None and model_lost(loaded.model):
                await self._drop_lost(loaded, loaded.model)
                loaded = None
            if loaded is None:
                if resolved is None:
                    resolved = await self._retrying(
                        [ref], stop, functools.partial(resolve_revision, self.store, location)
                    )
                loaded = LoadedModel(weights)
                self._models[weights] = loaded
                loaded.task = asyncio.create_task(self._load(loaded, ref, resolved))
            loaded.aliases[location] = ref
            self._aliases[location] = loaded
            joined = True
            assert loaded.task is not None
            served = loaded.model if loaded.model is not None else await asyncio.shield(loaded.task)
        except LoadAbandoned:
            log.info("model load abandoned while retrying", extra={"model": location})
            self._forget_alias(location)
            self._announce(ref, node_pb2.MODEL_STATE_UNLOADED)
            raise
        except Exception as exc:
            self._forget_alias(location)
            reason = failure_reason(exc)
            if not joined:  # a failed load of weights counts its own attempt (`_load`)
                self._count_failed_attempt(reason)
            if self.metrics is not None:
                self.metrics.loads_failed.labels(reason=reason).inc()
            log.error("model load failed", extra={"model": location, "reason": reason, "error": str(exc)})
            self._failed.add(location)
            self._announce(ref, node_pb2.MODEL_STATE_FAILED, str(exc))
            raise
        self._count_models()
        self._announce(
            ref,
            node_pb2.MODEL_STATE_READY,
            size_bytes=self._size(loaded),
            trained_through=loaded.trained_through,
        )
        return served

    def _forget_alias(self, location: str) -> None:
        loaded = self._aliases.pop(location, None)
        if loaded is not None:
            loaded.aliases.pop(location, None)

    async def _load(
        self, loaded: LoadedModel, ref: node_pb2.ModelRef, resolved: ResolvedRevision
    ) -> ServedModel:
        """Fetch, verify and load one set of weights (for `ref`, the revision that asked first)."""
        started = time.perf_counter()
        try:
            async with self._cache_lock:
                self._fetching += 1
            try:
                manifest, folder = await self._retrying(
                    lambda: list(loaded.aliases.values()) or [ref],
                    loaded.stop,
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
                loaded.folder = folder
                await asyncio.to_thread(touch, folder)
            finally:
                self._fetching -= 1
            await self._trim_cache()
            fetch_s = time.perf_counter() - started
            if self.metrics is not None:
                self.metrics.fetch_time.observe(fetch_s)
            family = model_class(manifest.backend)
            size = family.estimated_bytes(await asyncio.to_thread(folder_size, folder))
            await self._make_room(loaded, size)
            loaded.size = size
            model = await asyncio.to_thread(family.load, folder, manifest, self.settings.node)
            try:
                if model.size_bytes > size:
                    # What it really holds (an smt-transfer worker process): room for it too.
                    await self._make_room(loaded, model.size_bytes, loaded_already=True)
                loaded.size = max(model.size_bytes, 1)
                if model.learns_segments:
                    loaded.trained_through = await self._replay(ref, model, loaded.stop)
            except BaseException:
                await model.close(drain=False)
                raise
        except BaseException as exc:
            if self._models.get(loaded.weights) is loaded:
                del self._models[loaded.weights]
            loaded.folder = None
            if isinstance(exc, Exception) and not isinstance(exc, LoadAbandoned):
                self._count_failed_attempt(failure_reason(exc))
            raise
        loaded.model = model
        lost_listeners: list[Callable[[], None]] | None = getattr(model, "lost_listeners", None)
        if lost_listeners is not None:
            lost_listeners.append(functools.partial(self._on_lost, loaded, model))
        load_s = time.perf_counter() - started
        if self.metrics is not None:
            model.observe_with(self.metrics)
            self.metrics.load_time.observe(load_s)
        log.info(
            "model ready",
            extra={
                "model": ref.location,
                "weights": loaded.name,
                "load_s": round(load_s, 3),
                "fetch_s": round(fetch_s, 3),
            },
        )
        return model

    async def _drop_when_idle(self, loaded: LoadedModel, message: str) -> None:
        while loaded.model is not None and not self._idle(loaded):
            await asyncio.sleep(IDLE_POLL_S)
        if loaded.model is not None and self._models.get(loaded.weights) is loaded:
            await self._drop(loaded, message)

    # ---- letting go ----------------------------------------------------------------------

    async def unload(self, ref: node_pb2.ModelRef) -> None:
        """Stop serving the revision once the work routed to it is done, and unload its model when
        no other revision uses it. A load in progress is abandoned if it is waiting to retry and no
        other revision waits for the same weights, else awaited (its current attempt finishes). A
        revision whose load failed is announced UNLOADED, so the API service forgets the failure."""
        location = ref.location
        join = self._joins.get(location)
        if join is not None:
            join.stop.set()
            loading = self._aliases.get(location)
            if loading is not None and not loading.ready and set(loading.aliases) <= {location}:
                loading.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.shield(join.task)
        if location in self._aliases:
            while self._holds[location] > 0:
                await asyncio.sleep(IDLE_POLL_S)
            loaded = self._aliases.pop(location, None)
            if loaded is None:
                return  # dropped meanwhile (evicted, lost), and announced then
            alias = loaded.aliases.pop(location, ref)
            self._count_models()
            log.info("revision unloaded", extra={"model": location, "weights": loaded.name})
            self._announce(alias, node_pb2.MODEL_STATE_UNLOADED)
            if not loaded.aliases:
                while not self._idle(loaded):
                    await asyncio.sleep(IDLE_POLL_S)
                if not loaded.aliases:  # a revision may have joined the model meanwhile
                    await self._drop(loaded)
            return
        if location in self._failed and location not in self._joins:
            # Nothing is held, but the API service still records the failure: clear it.
            self._failed.discard(location)
            self._announce(ref, node_pb2.MODEL_STATE_UNLOADED)

    async def _drop(self, loaded: LoadedModel, message: str = "") -> None:
        """Unload the model now; every revision it still serves is announced UNLOADED."""
        if self._models.get(loaded.weights) is loaded:
            del self._models[loaded.weights]
        aliases = list(loaded.aliases.values())
        for ref in aliases:
            if self._aliases.get(ref.location) is loaded:
                del self._aliases[ref.location]
        loaded.aliases.clear()
        self._count_models()
        for ref in aliases:
            self._announce(ref, node_pb2.MODEL_STATE_UNLOADED, message)
        if loaded.folder is not None:
            await asyncio.to_thread(touch, loaded.folder)
        model, loaded.model = loaded.model, None
        if model is not None:
            await model.close(drain=not message)
            log.info("model unloaded", extra={"weights": loaded.name, "revisions": len(aliases)})

    def _on_lost(self, loaded: LoadedModel, model: ServedModel) -> None:
        """Called by a model whose worker died, on the event loop: drop it without waiting."""
        task = asyncio.get_running_loop().create_task(self._drop_lost(loaded, model))
        self._lost_drops.add(task)
        task.add_done_callback(self._lost_drops.discard)

    async def _drop_lost(self, loaded: LoadedModel, model: ServedModel) -> None:
        """Forget a model whose worker died (if it is still the one loaded) and announce its
        revisions UNLOADED: the next request for one loads it again."""
        if loaded.model is not model:
            return
        log.error(
            "model lost its worker process: dropped, it reloads on the next request",
            extra={"weights": loaded.name, "revisions": list(loaded.aliases)},
        )
        await self._drop(loaded, "the model's worker process died; it is loaded again on the next request")

    async def _make_room(self, loading: LoadedModel, size: int, *, loaded_already: bool = False) -> None:
        """Unload least recently used idle models until `size` more bytes fit the budget. With
        `loaded_already` (the model turned out larger than estimated once loaded) whatever cannot
        be freed is logged, not refused: the model holds its memory already."""
        budget = self.settings.node.memory_budget_bytes
        if budget <= 0:
            return
        while True:
            # Models loading count once their size is known (they passed this check already).
            others = [m for m in self._models.values() if m is not loading and m.size > 0]
            used = sum(self._size(m) for m in others)
            if used + size <= budget:
                return
            idle = [m for m in others if m.ready and self._idle(m)]
            if not idle and loaded_already:
                log.warning(
                    "a loaded model holds more than estimated and the memory budget is exceeded",
                    extra={
                        "weights": loading.name,
                        "size_bytes": size,
                        "used_bytes": used,
                        "budget_bytes": budget,
                    },
                )
                return
            if not idle:
                busy = ", ".join(sorted(a for m in others for a in m.aliases)) or "none"
                raise MemoryBudgetExceeded(
                    f"model {short_weights(loading.weights)} needs {size} bytes but the node's memory "
                    f"budget is {budget} bytes with {used} bytes held by models in use ({busy})"
                )
            victim = min(idle, key=lambda m: m.last_used)
            log.info(
                "unloading least recently used model to fit the memory budget",
                extra={"weights": victim.name, "revisions": list(victim.aliases)},
            )
            if self.metrics is not None:
                self.metrics.evictions.inc()
            await self._drop(victim)

    async def close(self) -> None:
        """Abandon loads in progress, then close every model."""
        for join in self._joins.values():
            join.stop.set()
        for loaded in self._models.values():
            loaded.stop.set()
        tasks = [join.task for join in self._joins.values()]
        tasks += [m.task for m in self._models.values() if m.task is not None and not m.ready]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for loaded in list(self._models.values()):
            if loaded.model is not None:
                await loaded.model.close()
        self._models.clear()
        self._aliases.clear()

    def _count_models(self) -> None:
        if self.metrics is not None:
            ready = self._ready()
            self.metrics.models_loaded.set(len(ready))
            self.metrics.revisions_loaded.set(sum(len(m.aliases) for m in ready))

    def _announce(
        self,
        ref: node_pb2.ModelRef,
        state: int,
        message: str = "",
        size_bytes: int = 0,
        trained_through: int | None = None,
    ) -> None:
        """The message travels to every API replica and on to admins: store URLs, paths and
        credentials are masked (the log keeps them)."""
        message = redact(message, self._secrets)
        status = node_pb2.ModelStatus(
            model=ref,
            state=state,  # type: ignore[arg-type]
            message=message,
            size_bytes=size_bytes,
            trained_through=trained_through,
        )
        for listener in self.listeners:
            listener(status)


def _with_weights(ref: node_pb2.ModelRef, weights: str) -> node_pb2.ModelRef:
    if ref.weights == weights:
        return ref
    return node_pb2.ModelRef(
        engine_id=ref.engine_id, revision=ref.revision, location=ref.location, weights=weights
    )


__all__ = [
    "LoadAbandoned",
    "LoadedModel",
    "Manifest",
    "MemoryBudgetExceeded",
    "ModelManager",
    "ModelNotLoaded",
    "SegmentsUnavailable",
    "failure_reason",
    "trim_cache",
]
