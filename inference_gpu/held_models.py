"""What an inference node holds: its loaded models by weights and by the revisions they serve, the
revisions whose last load failed, and the work in flight per revision; and the views of it the node
reports (revisions loaded, READY statuses, bytes held, the `serval_node_models_loaded` and
`serval_node_revisions_loaded` gauges).

The tables are the model manager's state, kept apart from the loading and unloading that change
them (`inference_gpu.model_manager`) so that the parts working beside the manager (the memory
budget, the store fetcher's disk cache, the trained segments) are each handed this one object to
read, rather than the manager itself.

A model is idle when no work item holds any of its revisions (`hold`/`release`) and its batcher has
nothing queued or running.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from inference_gpu.loaded_model import LoadedModel
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_status import ready_status
from serval.inference.v1 import node_pb2


class HeldModels:
    def __init__(self, metrics: NodeMetrics | None = None) -> None:
        self.metrics = metrics
        self.by_weights: dict[str, LoadedModel] = {}
        """Weights → the loaded model (ready or loading)."""
        self.by_revision: dict[str, LoadedModel] = {}
        """Revision location → the loaded model serving it (ready or loading)."""
        self.failed: set[str] = set()
        """Revision locations whose last load ended FAILED."""
        self.holds: Counter[str] = Counter()
        """Revision location → work items in flight for it."""

    def ready(self) -> list[LoadedModel]:
        """The ready models, each set of weights once, in the order they loaded."""
        return [model for model in self.by_weights.values() if model.ready]

    def loaded(self) -> list[str]:
        """The revisions served by a ready model, in the order their models loaded."""
        return [location for model in self.ready() for location in model.aliases]

    def folder_of(self, location: str) -> Path | None:
        """The disk cache copy serving a revision (None when it is not loaded)."""
        model = self.by_revision.get(location)
        return None if model is None else model.folder

    def folders_in_use(self) -> set[Path]:
        """The disk cache copies of every model loaded or loading."""
        return {m.folder for m in self.by_weights.values() if m.folder is not None}

    def bytes_held(self) -> int:
        """Memory the loaded models take, each set of weights counted once."""
        return sum(model.held_bytes() for model in self.ready())

    def statuses(self) -> list[node_pb2.ModelStatus]:
        """READY for every revision a ready model serves (each with the model's size and weights,
        and what a learning model has learned up to)."""
        return [ready_status(ref, model) for model in self.ready() for ref in model.aliases.values()]

    def trained_through(self, location: str) -> int | None:
        """The pair number the revision's ready model has learned up to; None when it learns none."""
        model = self.by_revision.get(location)
        return None if model is None or not model.ready else model.trained_through

    def hold(self, location: str) -> None:
        """A work item for the revision at `location` is in flight: its model must not be unloaded."""
        self.holds[location] += 1

    def release(self, location: str) -> None:
        self.holds[location] -= 1
        if self.holds[location] <= 0:
            del self.holds[location]

    def idle(self, model: LoadedModel) -> bool:
        busy = model.model is not None and model.model.pending > 0
        return not busy and not any(self.holds[location] for location in model.aliases)

    def forget_alias(self, location: str) -> None:
        loaded = self.by_revision.pop(location, None)
        if loaded is not None:
            loaded.aliases.pop(location, None)

    def count(self) -> None:
        """Set the gauges of models and revisions loaded."""
        if self.metrics is not None:
            ready = self.ready()
            self.metrics.models_loaded.set(len(ready))
            self.metrics.revisions_loaded.set(sum(len(m.aliases) for m in ready))
