"""The models an inference node holds: fetched from the model store, verified, loaded on demand.

Concurrent requests for one revision share a single load. Every state change (loading, ready,
failed) is announced to listeners, which forward it to the API service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from inference_gpu.engine import LoadedModel
from serval.inference.v1 import node_pb2
from serval_common.manifest import fetch_folder
from serval_common.settings import Settings
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

StatusListener = Callable[[node_pb2.ModelStatus], None]


class ModelManager:
    def __init__(self, settings: Settings, store: ModelStore) -> None:
        self.settings = settings
        self.store = store
        self._models: dict[str, LoadedModel] = {}
        self._loading: dict[str, asyncio.Task[LoadedModel]] = {}
        self._refs: dict[str, node_pb2.ModelRef] = {}
        self.listeners: list[StatusListener] = []

    def statuses(self) -> list[node_pb2.ModelStatus]:
        return [
            node_pb2.ModelStatus(
                model=self._refs[loc], state=node_pb2.MODEL_STATE_READY, size_bytes=m.size_bytes
            )
            for loc, m in self._models.items()
        ]

    async def get(self, ref: node_pb2.ModelRef) -> LoadedModel:
        model = self._models.get(ref.location)
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
                fetch_folder, self.store, ref.location, self.settings.node_cache_dir
            )
            model = await asyncio.to_thread(LoadedModel.load, folder, manifest, self.settings.node)
        except Exception as exc:
            log.error("model load failed", extra={"model": ref.location, "error": str(exc)})
            self._announce(ref, node_pb2.MODEL_STATE_FAILED, str(exc))
            raise
        self._models[ref.location] = model
        log.info(
            "model ready",
            extra={"model": ref.location, "load_s": round(time.perf_counter() - started, 3)},
        )
        self._announce(ref, node_pb2.MODEL_STATE_READY, size_bytes=model.size_bytes)
        return model

    async def unload(self, ref: node_pb2.ModelRef) -> None:
        model = self._models.pop(ref.location, None)
        if model is not None:
            await model.close()
            self._announce(ref, node_pb2.MODEL_STATE_UNLOADED)

    async def close(self) -> None:
        for model in self._models.values():
            await model.close()
        self._models.clear()

    def _announce(self, ref: node_pb2.ModelRef, state: int, message: str = "", size_bytes: int = 0) -> None:
        status = node_pb2.ModelStatus(model=ref, state=state, message=message, size_bytes=size_bytes)  # type: ignore[arg-type]
        for listener in self.listeners:
            listener(status)
