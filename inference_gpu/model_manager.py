"""The models an inference node holds: fetched from the model store, verified, loaded on demand,
unloaded when asked, when their worker dies or to fit the memory budget.

A loaded model is keyed by the weights it holds, not by the revision that named it
(`inference_gpu.loaded_model`): every revision whose manifest resolves to weights the node holds
is an alias of that one `LoadedModel`, added without a load. A revision the node has not seen
costs two small manifest reads to learn its weights, or none when the API service sent them with
the work (`ModelRef.weights`). Concurrent requests for one set of weights share a single load.
Every state change of a revision (loading, ready, failed, unloaded) is announced to listeners
(`inference_gpu.model_status`), which forward it to the API service.

`unload(revision)` removes one alias once the work routed to it is done (`held.hold`/`release`), and
unloads the model when its last alias goes and it is idle.

`ModelManager` does the loading and unloading; it holds the parts that work beside it, each handed
what it needs:

- `held` (`inference_gpu.held_models.HeldModels`): the tables of what the node holds, and the
  views of them the node reports;
- `fetcher` (`inference_gpu.store_fetch.StoreFetcher`): reads from the model store, retried, and
  the disk cache of fetched copies;
- `budget` (`inference_gpu.memory_budget.MemoryBudget`): the memory budget, which unloads least
  recently used idle models, with all their aliases, to make room;
- `segments` (`inference_gpu.trained_segments.TrainedSegments`): a model that learns segments
  (`ServedModel.learns_segments`) replays the engine's trained segments before it is announced
  READY, and learns pushed pairs and catches up while loaded.

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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass

from inference_gpu.disk_cache import folder_size, touch
from inference_gpu.families import ServedModel, model_class
from inference_gpu.held_models import HeldModels
from inference_gpu.loaded_model import LoadedModel, model_lost
from inference_gpu.memory_budget import MemoryBudget, MemoryBudgetExceeded
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_status import StatusAnnouncer
from inference_gpu.store_fetch import LoadAbandoned, StoreFetcher
from inference_gpu.trained_segments import SegmentSource, TrainedSegments
from serval.inference.v1 import node_pb2
from serval_common.manifest import ChecksumMismatch, ResolvedRevision, store_unavailable
from serval_common.settings import Settings
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.02


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
        self.held = HeldModels(metrics)
        self._announcer = StatusAnnouncer(settings)
        self.listeners = self._announcer.listeners
        """Called with every revision's status change."""
        self.fetcher = StoreFetcher(settings, store, self.held, self._announcer, metrics)
        self.segments = TrainedSegments(
            settings, self.held, self._announcer, self._unload_when_idle, segment_source, metrics
        )
        self.budget = MemoryBudget(settings, self.held, self._drop, metrics)
        self._joins: dict[str, _Join] = {}
        """Revision location → its load in progress."""
        self._background: set[asyncio.Task[None]] = set()
        """Models being unloaded without anyone waiting (lost, failed to learn)."""

    # ---- getting a revision's model --------------------------------------------------------

    async def get(self, ref: node_pb2.ModelRef) -> ServedModel:
        """The model serving `ref`: at once when it or its weights are loaded, else after its load."""
        location = ref.location
        held = self.held
        loaded = held.by_revision.get(location)
        if loaded is None and ref.weights:
            shared = held.by_weights.get(ref.weights)
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
        self.held.by_revision[ref.location] = model
        self.held.failed.discard(ref.location)
        model.touch()
        self.held.count()
        log.info(
            "revision served by a loaded model",
            extra={"model": ref.location, "engine_id": ref.engine_id, "weights": model.name},
        )
        self._announcer.ready(ref, model)

    async def _join(self, ref: node_pb2.ModelRef, stop: asyncio.Event) -> ServedModel:
        """Learn the revision's weights, then load them or join the model that holds or loads them."""
        location = ref.location
        held = self.held
        held.failed.discard(location)
        self._announcer.announce(ref, node_pb2.MODEL_STATE_LOADING)
        joined = False
        try:
            resolved: ResolvedRevision | None = None
            weights = ref.weights
            if not weights or weights not in held.by_weights:
                resolved = await self.fetcher.resolve(ref, stop)
                weights = resolved.weights
            ref = _with_weights(ref, weights)
            loaded = held.by_weights.get(weights)
            if loaded is not None and loaded.model is not None and model_lost(loaded.model):
                await self._drop_lost(loaded, loaded.model)
                loaded = None
            if loaded is None:
                if resolved is None:
                    resolved = await self.fetcher.resolve(ref, stop)
                loaded = LoadedModel(weights)
                held.by_weights[weights] = loaded
                loaded.task = asyncio.create_task(self._load(loaded, ref, resolved))
            loaded.aliases[location] = ref
            held.by_revision[location] = loaded
            joined = True
            assert loaded.task is not None
            served = loaded.model if loaded.model is not None else await asyncio.shield(loaded.task)
        except LoadAbandoned:
            log.info("model load abandoned while retrying", extra={"model": location})
            held.forget_alias(location)
            self._announcer.announce(ref, node_pb2.MODEL_STATE_UNLOADED)
            raise
        except Exception as exc:
            held.forget_alias(location)
            reason = failure_reason(exc)
            if not joined:  # a failed load of weights counts its own attempt (`_load`)
                self.fetcher.count_failed_attempt(reason)
            if self.metrics is not None:
                self.metrics.loads_failed.labels(reason=reason).inc()
            log.error("model load failed", extra={"model": location, "reason": reason, "error": str(exc)})
            held.failed.add(location)
            self._announcer.announce(ref, node_pb2.MODEL_STATE_FAILED, str(exc))
            raise
        held.count()
        self._announcer.ready(ref, loaded)
        return served

    async def _load(
        self, loaded: LoadedModel, ref: node_pb2.ModelRef, resolved: ResolvedRevision
    ) -> ServedModel:
        """Fetch, verify and load one set of weights (for `ref`, the revision that asked first)."""
        started = time.perf_counter()
        try:
            async with self.fetcher.fetching():
                manifest, folder = await self.fetcher.fetch(
                    lambda: list(loaded.aliases.values()) or [ref], loaded.stop, ref, resolved
                )
                loaded.folder = folder
            await self.fetcher.trim_cache()
            fetch_s = time.perf_counter() - started
            if self.metrics is not None:
                self.metrics.fetch_time.observe(fetch_s)
            family = model_class(manifest.backend)
            size = family.estimated_bytes(await asyncio.to_thread(folder_size, folder))
            await self.budget.make_room(loaded, size)
            loaded.size = size
            model = await asyncio.to_thread(family.load, folder, manifest, self.settings.node)
            try:
                if model.size_bytes > size:
                    # What it really holds (an smt-transfer worker process): room for it too.
                    await self.budget.make_room(loaded, model.size_bytes, loaded_already=True)
                loaded.size = max(model.size_bytes, 1)
                if model.learns_segments:
                    loaded.trained_through = await self.segments.replay(ref, model, loaded.stop)
            except BaseException:
                await model.close(drain=False)
                raise
        except BaseException as exc:
            if self.held.by_weights.get(loaded.weights) is loaded:
                del self.held.by_weights[loaded.weights]
            loaded.folder = None
            if isinstance(exc, Exception) and not isinstance(exc, LoadAbandoned):
                self.fetcher.count_failed_attempt(failure_reason(exc))
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

    # ---- letting go ----------------------------------------------------------------------

    async def unload(self, ref: node_pb2.ModelRef) -> None:
        """Stop serving the revision once the work routed to it is done, and unload its model when
        no other revision uses it. A load in progress is abandoned if it is waiting to retry and no
        other revision waits for the same weights, else awaited (its current attempt finishes). A
        revision whose load failed is announced UNLOADED, so the API service forgets the failure."""
        location = ref.location
        held = self.held
        join = self._joins.get(location)
        if join is not None:
            join.stop.set()
            loading = held.by_revision.get(location)
            if loading is not None and not loading.ready and set(loading.aliases) <= {location}:
                loading.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.shield(join.task)
        if location in held.by_revision:
            while held.holds[location] > 0:
                await asyncio.sleep(IDLE_POLL_S)
            loaded = held.by_revision.pop(location, None)
            if loaded is None:
                return  # dropped meanwhile (evicted, lost), and announced then
            alias = loaded.aliases.pop(location, ref)
            held.count()
            log.info("revision unloaded", extra={"model": location, "weights": loaded.name})
            self._announcer.announce(alias, node_pb2.MODEL_STATE_UNLOADED)
            if not loaded.aliases:
                while not held.idle(loaded):
                    await asyncio.sleep(IDLE_POLL_S)
                if not loaded.aliases:  # a revision may have joined the model meanwhile
                    await self._drop(loaded)
            return
        if location in held.failed and location not in self._joins:
            # Nothing is held, but the API service still records the failure: clear it.
            held.failed.discard(location)
            self._announcer.announce(ref, node_pb2.MODEL_STATE_UNLOADED)

    async def _drop(self, loaded: LoadedModel, message: str = "") -> None:
        """Unload the model now; every revision it still serves is announced UNLOADED."""
        held = self.held
        if held.by_weights.get(loaded.weights) is loaded:
            del held.by_weights[loaded.weights]
        aliases = list(loaded.aliases.values())
        for ref in aliases:
            if held.by_revision.get(ref.location) is loaded:
                del held.by_revision[ref.location]
        loaded.aliases.clear()
        held.count()
        for ref in aliases:
            self._announcer.announce(ref, node_pb2.MODEL_STATE_UNLOADED, message)
        if loaded.folder is not None:
            await asyncio.to_thread(touch, loaded.folder)
        model, loaded.model = loaded.model, None
        if model is not None:
            await model.close(drain=not message)
            log.info("model unloaded", extra={"weights": loaded.name, "revisions": len(aliases)})

    def _in_background(self, drop: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(drop)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _unload_when_idle(self, loaded: LoadedModel, message: str) -> None:
        """Unload the model (every revision announced UNLOADED with `message`) once no work holds
        it, without waiting here."""
        self._in_background(self._drop_when_idle(loaded, message))

    async def _drop_when_idle(self, loaded: LoadedModel, message: str) -> None:
        while loaded.model is not None and not self.held.idle(loaded):
            await asyncio.sleep(IDLE_POLL_S)
        if loaded.model is not None and self.held.by_weights.get(loaded.weights) is loaded:
            await self._drop(loaded, message)

    def _on_lost(self, loaded: LoadedModel, model: ServedModel) -> None:
        """Called by a model whose worker died, on the event loop: drop it without waiting."""
        self._in_background(self._drop_lost(loaded, model))

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

    async def close(self) -> None:
        """Abandon loads in progress, then close every model."""
        models = self.held.by_weights
        for join in self._joins.values():
            join.stop.set()
        for loaded in models.values():
            loaded.stop.set()
        tasks = [join.task for join in self._joins.values()]
        tasks += [m.task for m in models.values() if m.task is not None and not m.ready]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for loaded in list(models.values()):
            if loaded.model is not None:
                await loaded.model.close()
        models.clear()
        self.held.by_revision.clear()


def _with_weights(ref: node_pb2.ModelRef, weights: str) -> node_pb2.ModelRef:
    if ref.weights == weights:
        return ref
    return node_pb2.ModelRef(
        engine_id=ref.engine_id, revision=ref.revision, location=ref.location, weights=weights
    )
