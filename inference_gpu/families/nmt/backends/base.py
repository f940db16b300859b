"""What every backend offers the inference node: load a model folder, translate batches, unload."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import numpy as np
import numpy.typing as npt

from serval_common.core import UNKNOWN_SENDER, Detail, Sender
from serval_common.settings import NodeSettings


@dataclass(frozen=True)
class TranslateRequest:
    """One segment as model tokens. Requests in one backend call share `key`."""

    source: list[str]
    target_prefix: list[str]
    num_hypotheses: int = 1
    beam_size: int = 1
    engine: str = field(default="", compare=False)
    """The engine that asked: requests of any engines sharing the model share batches (metrics only)."""
    detail: Detail = field(default=Detail.FULL, compare=False)
    """`Detail.TEXT`: the caller reads the words only, so the backend computes neither the
    per-token log-probabilities nor the attention for it (requests of either share a batch)."""
    sender: Sender = field(default=UNKNOWN_SENDER, compare=False)
    """Who asked: the batcher takes turns between owners and serves interactive work first (any
    senders share a batch)."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.num_hypotheses, self.beam_size)


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis, target language code stripped (a typed prefix's pieces kept), best first
    within a request.

    `log_probs[i]` is the log-probability of `tokens[i]`; `eos_log_prob` that of the end token
    after them (None when decoding stopped at the length limit). `attention[i]` is `tokens[i]`'s
    attention over all source tokens (language code and `</s>` included). `score` is the
    backend's ranking score. A `Detail.TEXT` request's hypotheses have no log-probabilities and
    an empty attention.
    """

    tokens: list[str]
    score: float
    log_probs: list[float]
    eos_log_prob: float | None
    attention: npt.NDArray[np.float32]


class Backend(ABC):
    name: str

    @classmethod
    @abstractmethod
    def load(cls, folder: Path, settings: NodeSettings, max_positions: int | None = None) -> Self:
        """Load the model in `folder`; blocking. `max_positions` bounds input and output lengths."""

    @abstractmethod
    def translate(self, requests: list[TranslateRequest]) -> list[list[Hypothesis]]:
        """Translate one batch (all with the same `key`); blocking, thread-safe."""

    @abstractmethod
    def unload(self) -> None:
        """Release the model's memory; translate must not be running."""

    @property
    @abstractmethod
    def size_bytes(self) -> int: ...

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def compute_type(self) -> str:
        return "float32"

    @property
    def max_concurrent_batches(self) -> int:
        """How many `translate` calls may run at once."""
        return 1
