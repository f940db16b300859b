"""One loaded model on an inference node: one set of weights, and the revisions it serves.

NLLB-200 is one model for 200 languages, so many engines' revisions serve the same weights (an
inference-only build publishes its base model as it is). The node holds such weights once: one
`LoadedModel`, one `ServedModel` (one batcher, so requests of every engine, owner and target
language share batches), and one alias per revision. The memory budget, LRU eviction, drain, the
admin's load and unload and the metrics count it once; it is unloaded when its last alias goes, or
by LRU. What differs per engine (its languages, its trained segments, its owner checks) travels with
each request, never with the loaded model.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from inference_gpu.families import ServedModel
from serval.inference.v1 import node_pb2
from serval_common.model_revision import short_weights


@dataclass(eq=False)
class LoadedModel:
    weights: str
    """The weights identity (`serval_common.model_revision`)."""
    aliases: dict[str, node_pb2.ModelRef] = field(default_factory=dict)
    """Revision location → its reference: the revisions served by these weights (loading or ready)."""
    model: ServedModel | None = None
    """None while loading."""
    task: asyncio.Task[ServedModel] | None = None
    """The load, shared by every revision waiting for these weights."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to abandon the load's retries: no revision wants these weights any more, or the node closes."""
    size: int = 0
    """Bytes the memory budget counts, once for all aliases: an estimate from the folder's size
    while loading, then what the loaded model reports it holds (`ServedModel.size_bytes`, read
    again whenever the budget is counted: a learning model grows)."""
    folder: Path | None = None
    """The copy in the disk cache the model was loaded from."""
    last_used: float = field(default_factory=time.monotonic)
    trained_through: int | None = None
    """Families that learn segments: the pair number the model has learned up to (every pair of the
    engine up to it is in the model); None for the others."""
    learning: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Taken while pairs are applied (a pushed one, a catch-up): the model learns them in order."""

    @property
    def ready(self) -> bool:
        return self.model is not None

    @property
    def name(self) -> str:
        """How logs name the model: its weights, shortened."""
        return short_weights(self.weights)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def held_bytes(self) -> int:
        """What the model holds now, as its family counts it (an `smt-transfer` worker process's
        resident memory grows as it learns), kept as `size`; the estimate while it loads."""
        if self.model is not None:
            with contextlib.suppress(Exception):
                size = self.model.size_bytes
                if size > 0:
                    self.size = size
        return self.size


def model_lost(model: ServedModel) -> bool:
    """Whether the model's worker process died (families that run one say so with `lost`)."""
    return bool(getattr(model, "lost", False))
