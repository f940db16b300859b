"""What one inference node holds, as it reported it: model revisions and the weights they share.

A node holds each set of weights once, as one loaded model, and every revision serving those
weights is an alias of it (`serval_common.model_revision`). The node reports each alias's state
with its weights identity and the loaded model's size; this record keeps both views: a revision's
own state, and whether its weights are loaded here under any alias, so a request for an engine the
node never saw goes to it at once when it holds the engine's weights.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from serval.inference.v1 import node_pb2
from serval_common.model_revision import ModelRevision

READY = node_pb2.MODEL_STATE_READY
LOADING = node_pb2.MODEL_STATE_LOADING
FAILED = node_pb2.MODEL_STATE_FAILED
UNSPECIFIED = node_pb2.MODEL_STATE_UNSPECIFIED


@dataclass(frozen=True)
class LoadedWeights:
    """One loaded model (or one being loaded) on a node, and the revisions it serves."""

    weights: str
    """The weights identity, or the revision's location when the node did not say."""
    state: int
    size_bytes: int
    aliases: tuple[ModelRevision, ...]


@dataclass
class HeldModels:
    _states: dict[str, int] = field(default_factory=dict)
    """Revision location → its state (LOADING, READY, FAILED)."""
    _weights: dict[str, str] = field(default_factory=dict)
    """Revision location → the weights it serves, where known."""
    _sizes: dict[str, int] = field(default_factory=dict)
    """Weights key (`_key`) → the loaded model's size."""
    _ready: Counter[str] = field(default_factory=Counter)
    """Weights → how many of its aliases are READY."""
    _loading: Counter[str] = field(default_factory=Counter)
    _through: dict[str, int] = field(default_factory=dict)
    """Revision location → the pair number its READY model has learned up to (families that learn
    segments: `ModelStatus.trained_through`)."""

    def state(self, location: str) -> int:
        """The revision's own state (UNSPECIFIED when the node never had it)."""
        return self._states.get(location, UNSPECIFIED)

    def serves(self, model: ModelRevision) -> int:
        """The revision's state counting what its weights allow: READY when the node holds its
        weights ready under any revision (the node aliases them without a load), LOADING when it
        is loading them, else the revision's own state."""
        own = self.state(model.location)
        if own == READY or not model.weights:
            return own
        if self._ready[model.weights] > 0:
            return READY
        if own == UNSPECIFIED and self._loading[model.weights] > 0:
            return LOADING
        return own

    def weights_of(self, location: str) -> str:
        return self._weights.get(location, "")

    def size_of(self, model: ModelRevision) -> int:
        """The loaded model's size for this revision's weights (0 = not known here)."""
        key = model.weights or self._weights.get(model.location) or model.location
        return self._sizes.get(key, 0)

    def trained_through(self, location: str) -> int | None:
        """The pair number the revision's READY model has learned up to; None when it learns none
        (or is not READY, or the node does not say)."""
        return self._through.get(location)

    def learned(self, location: str, through: int) -> None:
        """The READY model has learned up to `through` (it never goes back)."""
        if self._states.get(location) == READY and location in self._through:
            self._through[location] = max(self._through[location], through)

    def set(
        self,
        location: str,
        state: int,
        weights: str = "",
        size_bytes: int = 0,
        trained_through: int | None = None,
    ) -> None:
        """Record a revision's state; UNSPECIFIED or UNLOADED forget it."""
        self._count(location, -1)
        if state == READY and trained_through is not None:
            self._through[location] = trained_through
        else:
            self._through.pop(location, None)
        if state in (UNSPECIFIED, node_pb2.MODEL_STATE_UNLOADED):
            self._states.pop(location, None)
            key = self._key(location)
            self._weights.pop(location, None)
            if not any(self._key(other) == key for other in self._states):
                self._sizes.pop(key, None)
            return
        self._states[location] = state
        if weights:
            self._weights[location] = weights
        if size_bytes > 0:
            self._sizes[self._key(location)] = size_bytes
        self._count(location, +1)

    def remove(self, location: str) -> None:
        self.set(location, UNSPECIFIED)

    def revisions(self) -> list[ModelRevision]:
        """The revisions the node holds or is loading (any state), with their weights where known."""
        return [
            revision
            for location in list(self._states)
            if (revision := ModelRevision.parse(location, self._weights.get(location, ""))) is not None
        ]

    def loaded(self) -> list[LoadedWeights]:
        """One entry per set of weights, its best state and the revisions serving it."""
        groups: dict[str, list[str]] = {}
        for location in self._states:
            groups.setdefault(self._key(location), []).append(location)
        entries = []
        for key, locations in groups.items():
            states = [self._states[location] for location in locations]
            state = READY if READY in states else LOADING if LOADING in states else states[0]
            aliases = tuple(
                sorted(
                    (r for loc in locations if (r := ModelRevision.parse(loc, key)) is not None),
                    key=lambda r: (r.engine_id, r.revision),
                )
            )
            entries.append(LoadedWeights(key, state, self._sizes.get(key, 0), aliases))
        return sorted(entries, key=lambda entry: entry.weights)

    def bytes_held(self) -> int:
        """Memory of the models held, each set of weights counted once."""
        return sum(self._sizes.get(key, 0) for key in {self._key(location) for location in self._states})

    def __len__(self) -> int:
        """How many sets of weights the node holds (or loads)."""
        return len({self._key(location) for location in self._states})

    def _key(self, location: str) -> str:
        return self._weights.get(location) or location

    def _count(self, location: str, delta: int) -> None:
        weights = self._weights.get(location)
        state = self._states.get(location)
        if not weights or state is None:
            return
        counter = self._ready if state == READY else self._loading if state == LOADING else None
        if counter is not None:
            counter[weights] += delta
            if counter[weights] <= 0:
                del counter[weights]
