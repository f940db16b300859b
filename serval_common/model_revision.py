"""One model revision's identity: where it lives in the model store and which weights it serves.

`ModelRevision` is the one place the revision key `models/{engineId}/{revision}` is built and
parsed; the API service, the inference node and the build jobs all go through it.

A revision's **weights** are what a node loads into memory for it. NLLB-200 is one model for 200
languages, so most revisions are inference-only builds that publish a base model as it is
(`weights_from`): every such revision, of any engine and any owner, serves the same weights, and a
node holds them once, as one loaded model whose aliases the revisions are. The weights identity is
a digest of what serving reads: the manifest's backend and position limit and every served file's
path, size and sha256, following `weights_from`. So two revisions share weights exactly when a
node would load the same bytes, wherever they are stored: two engines fine-tuned into
byte-identical weights share them too.

Models that learn each engine's confirmed segments as they serve (`smt-transfer`, `thot-smt`
folders) change per engine, so they are never shared: their weights identity is their revision's
own location.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from serval_common.names import check_base_model_name, check_id

MODELS = "models"
"""The store folder holding model revisions: `models/{engineId}/{revision}/`."""

BASE_MODELS = "base-models"
"""The store folder holding base models: `base-models/{name}/`."""

TRAINING_CHECKPOINT = "hf"
"""The subfolder holding the Hugging Face checkpoint a build fine-tunes; serving never needs it."""

WEIGHTS_PREFIX = "w-"


@dataclass(frozen=True, slots=True)
class ModelRevision:
    """One model revision of one engine, or a base model served as it is (the public base model
    of the SIL Converters and LibreTranslate dialects: no engine, `engine_id` "" and revision 0).
    Equal revisions are the same engine and number (or base model); `weights` ("" when not known
    yet) travels with it and takes no part in equality."""

    engine_id: str
    revision: int
    weights: str = field(default="", compare=False)
    base_model: str = ""

    @classmethod
    def of_base_model(cls, name: str, weights: str = "") -> ModelRevision:
        return cls("", 0, weights, name)

    @property
    def location(self) -> str:
        """The revision's folder in the model store."""
        if self.base_model:
            return f"{BASE_MODELS}/{self.base_model}"
        return f"{MODELS}/{self.engine_id}/{self.revision}"

    def checked_location(self) -> str:
        """`location`, refusing an engine id that cannot be a store key segment (`InvalidName`)."""
        if self.base_model:
            return f"{BASE_MODELS}/{check_base_model_name(self.base_model)}"
        return f"{MODELS}/{check_id('engine', self.engine_id)}/{self.revision}"

    def with_weights(self, weights: str) -> ModelRevision:
        return ModelRevision(self.engine_id, self.revision, weights, self.base_model)

    @classmethod
    def parse(cls, location: str, weights: str = "") -> ModelRevision | None:
        """The revision at a `models/{engineId}/{revision}` or `base-models/{name}` location;
        None for anything else."""
        parts = location.split("/")
        if len(parts) == 2 and parts[0] == BASE_MODELS and parts[1]:
            return cls.of_base_model(parts[1], weights)
        if len(parts) != 3 or parts[0] != MODELS or not parts[1] or not parts[2].isdigit():
            return None
        return cls(parts[1], int(parts[2]), weights)

    def __str__(self) -> str:
        return self.location


def engine_models_prefix(engine_id: str) -> str:
    """The store folder holding every revision of one engine (removed with the engine)."""
    return f"{MODELS}/{check_id('engine', engine_id)}"


class ServedFile(Protocol):
    """A file of a model folder as its manifest lists it (`manifest.ManifestFile`)."""

    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...


def weights_identity(
    location: str,
    *,
    learns_segments: bool,
    backend: str,
    max_positions: int | None,
    files: Iterable[ServedFile],
) -> str:
    """The weights a node loads for the revision at `location`, from what its manifest says
    (`manifest.ResolvedRevision.weights` reads them): whether it learns segments, its backend,
    and the position limit and files of the folder holding its weights (`weights_from`, or its own)."""
    if learns_segments:
        return location  # a model that learns per engine (train-segment) is never shared
    digest = hashlib.sha256(f"{backend}\n{max_positions or 0}\n".encode())
    for entry in sorted(files, key=lambda f: f.path):
        if entry.path.startswith(f"{TRAINING_CHECKPOINT}/"):
            continue  # the training checkpoint is never loaded for serving
        digest.update(f"{entry.path}\0{entry.size}\0{entry.sha256}\n".encode())
    return WEIGHTS_PREFIX + digest.hexdigest()[:32]


def short_weights(weights: str) -> str:
    """A weights identity as logs and admin views show it: a digest's first 12 hex digits, or the
    revision location of weights that are never shared."""
    return weights[: len(WEIGHTS_PREFIX) + 12] if weights.startswith(WEIGHTS_PREFIX) else weights
