"""What the API service asks of an inference node, independent of the stream that carries it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ModelKey:
    """One model revision of one engine, and where it lives in the model store."""

    engine_id: str
    revision: int

    @property
    def location(self) -> str:
        return f"models/{self.engine_id}/{self.revision}"

    @classmethod
    def parse(cls, location: str) -> ModelKey | None:
        """The key of a `models/{engineId}/{revision}` location; None for anything else."""
        parts = location.split("/")
        if len(parts) != 3 or parts[0] != "models" or not parts[2].isdigit():
            return None
        return cls(parts[1], int(parts[2]))


@dataclass(frozen=True)
class TranslateWork:
    """translate (n = 1) or translate-n (n > 1) of one segment with one model revision."""

    model: ModelKey
    family: str
    """The engine's type (`nmt`, `smt-transfer`): only nodes serving the family get the work."""
    source_language: str
    target_language: str
    segment: str
    n: int = 1
    prefix: str = ""
    """Target text the user typed; every result starts with it."""


@dataclass(frozen=True)
class WordGraphWork:
    """The word graph of one segment with one model revision."""

    model: ModelKey
    family: str
    source_language: str
    target_language: str
    segment: str


@dataclass(frozen=True)
class TrainSegmentWork:
    """Learn one confirmed pair into a loaded model revision (families that learn segments)."""

    model: ModelKey
    family: str
    source_segment: str
    target_segment: str
    sentence_start: bool
    seq: int
    """The pair's `TrainSegment.id`: a node applies each once, replayed or sent."""


@dataclass(frozen=True)
class AlignWork:
    """Align one sentence pair with a word-alignment model revision."""

    model: ModelKey
    family: str
    source_segment: str
    target_segment: str


@dataclass(frozen=True)
class Served(Generic[T]):
    """An answer and the model revision that gave it: during a hot swap an older revision may
    still answer, and clients can see which (`X-Model-Revision`)."""

    value: T
    revision: int
