"""What every engine family's loaded model offers the inference node.

A family (Serval's engine type: `nmt`, `smt-transfer`, `statistical`) is one kind of model folder
(the manifest's `backend`) and one `ServedModel` subclass that loads it and answers the operations
it declares in `capabilities`. The node calls only this interface, so routing, memory budget, LRU,
hot swap, drain and metrics work the same for every family; an operation a family lacks raises
`Unsupported` (the API service answers 405).

A failure the work runner answers with its own `WorkError` code is a `WorkFailure`: the client's
input (`BadInput`, `InputTooLong`), a model that cannot be had (`ModelUnavailable`), an operation
the family lacks (`Unsupported`). Any other exception is the node's own fault: an internal error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Self

from inference_gpu.metrics import NodeMetrics
from serval.inference.v1 import node_pb2
from serval_common.core import (
    UNKNOWN_SENDER,
    Detail,
    Sender,
    TranslationResult,
    WordAlignmentResult,
    WordGraph,
)
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings


class Capability(StrEnum):
    TRANSLATE = "translate"
    N_BEST = "n-best"
    PREFIX = "prefix"
    WORD_GRAPH = "word-graph"
    TRAIN_SEGMENT = "train-segment"
    ALIGN = "align"


class WorkFailure(Exception):
    """A failure answered with `code`, the node protocol's `WorkErrorCode` for it."""

    code: ClassVar[node_pb2.WorkErrorCode]


class BadInput(WorkFailure, ValueError):
    """The client's input cannot be served: an empty segment, a language code the model does not
    know, n < 1, a pair to train or align without words."""

    code = node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT


class InputTooLong(BadInput):
    """The segment has more tokens than the node accepts (`max_input_tokens`)."""


class ModelUnavailable(WorkFailure):
    """The revision's model cannot be loaded here: its manifest names a backend no node serves."""

    code = node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE


class Unsupported(WorkFailure):
    """The model's family cannot do the operation."""

    code = node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED

    def __init__(self, family: str, capability: Capability) -> None:
        super().__init__(f"a {family} engine cannot {capability.value.replace('-', ' ')}")


class ServedModel(ABC):
    family: ClassVar[str]
    """Serval's engine type this model serves: `nmt`, `smt-transfer` or `statistical`."""
    capabilities: ClassVar[frozenset[Capability]]
    manifest: Manifest

    @classmethod
    @abstractmethod
    def load(
        cls,
        folder: Path,
        manifest: Manifest,
        node_settings: NodeSettings,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> Self:
        """Load the model folder (verified against `manifest`); blocking (seconds for a large model),
        so call it in a worker thread from async code."""

    @property
    @abstractmethod
    def size_bytes(self) -> int:
        """Memory the model holds, as the node's memory budget counts it (read again whenever the
        budget is counted: a model that learns may grow)."""

    @classmethod
    def estimated_bytes(cls, folder_bytes: int) -> int:
        """What a model whose folder holds `folder_bytes` is expected to hold once loaded: the
        memory budget makes room for this before the load, and counts `size_bytes` after it."""
        return folder_bytes

    @property
    @abstractmethod
    def pending(self) -> int:
        """Operations queued or running: the model is unloaded only when this is 0."""

    @property
    def learns_segments(self) -> bool:
        """Whether train-segment changes the model (the node then replays trained segments on load)."""
        return Capability.TRAIN_SEGMENT in self.capabilities

    def observe_with(self, metrics: NodeMetrics) -> None:
        """Report the model's work to the node's metrics (optional)."""
        return None

    def _unsupported(self, capability: Capability) -> Unsupported:
        return Unsupported(self.family, capability)

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
    ) -> list[TranslationResult]:
        """Up to n distinct translations, best first; with a `prefix`, each one starts with it.
        `engine_id` names the engine asking (a model may serve several; for metrics); `detail`
        says what the caller will read (a family may skip computing the rest); `sender` who asked
        (a family that batches takes turns between owners)."""
        raise self._unsupported(Capability.TRANSLATE)

    async def word_graph(
        self,
        segment: str,
        source_code: str,
        target_code: str,
        *,
        engine_id: str = "",
        sender: Sender = UNKNOWN_SENDER,
    ) -> WordGraph:
        raise self._unsupported(Capability.WORD_GRAPH)

    async def train_segment(self, source: str, target: str, sentence_start: bool, seq: int) -> None:
        """Learn one confirmed pair at once; a `seq` already applied is skipped."""
        raise self._unsupported(Capability.TRAIN_SEGMENT)

    async def align(self, source: str, target: str) -> WordAlignmentResult:
        raise self._unsupported(Capability.ALIGN)

    @abstractmethod
    async def close(self, *, drain: bool = True) -> None:
        """Stop taking requests, answer (or fail) the queued ones, then free the model."""
