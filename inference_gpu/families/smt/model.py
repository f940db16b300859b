"""The `smt-transfer` family: a Thot phrase-based model (`serval_common.thot_smt` describes its
folder) serving translate, n-best, prefix, word graph and train-segment. Importing this module
needs the `smt` extra (sil-machine, sil-thot): without it the node does not claim the family.

**A process per model.** Thot's decoder holds the GIL for the whole of a decode (a word graph of a
long verse takes seconds), so a worker thread would still stall the node's event loop and every
other model. Each loaded model therefore lives in a worker process of its own
(`ProcessPoolExecutor` with one worker, spawned); the node awaits its answers. The decoder is not
safe to share, so one model runs one operation at a time, in arrival order (`_lock`):
translations, word graphs and train-segment never overlap, and a translate sent after a
train-segment sees the trained pair. If the worker dies (killed, out of memory) the call fails
with `WorkerLost` (the node answers "model unavailable"), the model is marked `lost` and tells its
`lost_listeners`: the model manager drops it and announces it UNLOADED, and the next request loads
the revision afresh, replaying the engine's trained segments, so no silently forgetful model is
ever served.

The worker process holds an `SmtEngine` (`inference_gpu.families.smt.engine`: translate, n-best,
prefix-constrained translation, word graphs and their cache, train-segment) through
`inference_gpu.families.smt.worker`; the word graphs' pruning and prefix search are
`inference_gpu.families.smt.word_graph`'s.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inference_gpu.families.base import BadInput, Capability, ServedModel
from inference_gpu.families.smt.worker import resident_bytes, worker_call, worker_load
from serval.inference.v1 import node_pb2
from serval_common.core import UNKNOWN_SENDER, Detail, Sender
from serval_common.core import TranslationResult as CoreResult
from serval_common.core import WordGraph as CoreGraph
from serval_common.manifest import Manifest
from serval_common.node_codec import graph_from_wire, result_from_wire
from serval_common.settings import NodeSettings
from serval_common.store import StoreError

log = logging.getLogger(__name__)


class WorkerLost(StoreError):
    """The model's worker process died. A `StoreError`, so the work item is answered "model
    unavailable"; the manager reloads the revision for the next one."""


WORKER_BASE_BYTES = 64 << 20
"""Resident memory of a worker process besides its model (Python, sil-machine, Thot), at least:
measured 85 to 114 MB resident for a model of 5 MB on disk. The estimate before a load stays low
(the budget then counts what the process really holds, and unloads more if it must)."""
MEMORY_PER_DISK_BYTE = 2
"""A Thot model holds about twice its folder's size in memory once loaded (the New Testament
model: 87 MB on disk, about 200 MB in memory, besides the worker process itself)."""


@dataclass
class SmtModel(ServedModel):
    family = "smt-transfer"
    capabilities = frozenset(
        {
            Capability.TRANSLATE,
            Capability.N_BEST,
            Capability.PREFIX,
            Capability.WORD_GRAPH,
            Capability.TRAIN_SEGMENT,
        }
    )

    manifest: Manifest
    folder: Path
    worker: ProcessPoolExecutor
    memory_bytes: int
    """The worker process's resident memory when last read."""
    worker_process_id: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _pending: int = 0
    _applied: set[int] = field(default_factory=set)
    _closed: bool = False
    lost: bool = False
    """The worker process died: the model answers nothing more (see the module docstring)."""
    lost_listeners: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def load(
        cls,
        folder: Path,
        manifest: Manifest,
        node_settings: NodeSettings,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> SmtModel:
        """Start the model's worker process and load the folder there (blocking)."""
        worker = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        try:
            pid, resident = worker.submit(worker_load, str(folder), node_settings.max_input_tokens).result()
        except BaseException:
            worker.shutdown(wait=False, cancel_futures=True)
            raise
        disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        return cls(manifest, folder, worker, max(resident, disk), pid)

    @classmethod
    def estimated_bytes(cls, folder_bytes: int) -> int:
        return WORKER_BASE_BYTES + MEMORY_PER_DISK_BYTE * folder_bytes

    @property
    def size_bytes(self) -> int:
        """The worker process's resident memory now: the model, what it has learned and cached, and
        the process itself (all of it is the model's: the worker holds nothing else)."""
        if self.worker_process_id and not self.lost and not self._closed:
            resident = resident_bytes(self.worker_process_id)
            if resident > 0:
                self.memory_bytes = resident
        return self.memory_bytes

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def applied_segments(self) -> frozenset[int]:
        return frozenset(self._applied)

    async def _call(self, method: str, *args: Any) -> Any:
        if self.lost:
            raise WorkerLost(f"the worker process of model {self.manifest.engine_id} died")
        if self._closed:
            raise RuntimeError("the model is closed")
        self._pending += 1
        try:
            async with self._lock:
                return await self._run(worker_call, method, *args)
        finally:
            self._pending -= 1

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the worker process; its death marks the model lost."""
        if self.lost:
            raise WorkerLost(f"the worker process of model {self.manifest.engine_id} died")
        try:
            return await asyncio.wrap_future(self.worker.submit(function, *args))
        except BrokenProcessPool as exc:
            first = not self.lost
            self.lost = True
            if first:
                log.error(
                    "smt model worker process died",
                    extra={"engine_id": self.manifest.engine_id, "revision": self.manifest.revision},
                )
                for listener in self.lost_listeners:
                    listener()
            raise WorkerLost(f"the worker process of model {self.manifest.engine_id} died") from exc

    async def cached_segments(self) -> list[str]:
        """The segments whose word graphs the worker's cache holds, least recently used first."""
        segments: list[str] = await self._call("cached_segments")
        return segments

    async def worker_pid(self) -> int:
        """The process id of the model's worker."""
        pid: int = await self._run(os.getpid)
        return pid

    async def translate(
        self,
        segment: str,
        n: int,
        source_code: str,
        target_code: str,
        prefix: str = "",
        *,
        engine_id: str = "",
        detail: Detail = Detail.FULL,
        sender: Sender = UNKNOWN_SENDER,
    ) -> list[CoreResult]:
        """The worker answers in the node protocol's messages; Thot computes every field anyway."""
        if n < 1:
            raise BadInput("n must be at least 1")
        raw: list[bytes] = await self._call("translate", segment, n, prefix)
        return [result_from_wire(node_pb2.TranslationResult.FromString(r)) for r in raw]

    async def word_graph(
        self,
        segment: str,
        source_code: str,
        target_code: str,
        *,
        engine_id: str = "",
        sender: Sender = UNKNOWN_SENDER,
    ) -> CoreGraph:
        return graph_from_wire(node_pb2.WordGraph.FromString(await self._call("word_graph", segment)))

    async def train_segment(self, source: str, target: str, sentence_start: bool, seq: int) -> None:
        """Learn the pair at once; a `seq` already applied is skipped (replay and fan-out may both
        deliver it). A seq of 0 (none) is always applied."""
        if seq and seq in self._applied:
            return
        self._pending += 1
        try:
            async with self._lock:
                if seq and seq in self._applied:
                    return
                await self._run(worker_call, "train_segment", source, target, sentence_start)
                if seq:
                    self._applied.add(seq)
        finally:
            self._pending -= 1

    async def close(self, *, drain: bool = True) -> None:
        """Stop taking requests; with `drain`, let the queued ones finish; then end the worker
        process (which frees the model)."""
        self._closed = True
        if drain:
            while self._pending:
                await asyncio.sleep(0.01)
        await asyncio.to_thread(self.worker.shutdown, wait=True, cancel_futures=not drain)
