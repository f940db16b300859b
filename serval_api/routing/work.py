"""What the API service asks of an inference node, independent of the stream that carries it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from serval_common.core import UNKNOWN_SENDER, Detail, Sender
from serval_common.model_revision import ModelRevision

T = TypeVar("T")


@dataclass(frozen=True)
class TranslateWork:
    """translate (n = 1) or translate-n (n > 1) of one segment with one model revision."""

    model: ModelRevision
    family: str
    """The engine's type (`nmt`, `smt-transfer`): only nodes serving the family get the work."""
    source_language: str
    target_language: str
    segment: str
    n: int = 1
    prefix: str = ""
    """Target text the user typed; every result starts with it."""
    detail: Detail = Detail.FULL
    """What the caller will read: the node computes nothing more."""
    sender: Sender = UNKNOWN_SENDER
    """Who asked, and whether someone waits for it: the node's batcher takes turns between owners."""


@dataclass(frozen=True)
class WordGraphWork:
    """The word graph of one segment with one model revision."""

    model: ModelRevision
    family: str
    source_language: str
    target_language: str
    segment: str
    sender: Sender = UNKNOWN_SENDER


@dataclass(frozen=True)
class TrainSegmentWork:
    """Learn one confirmed pair into a loaded model revision (families that learn segments)."""

    model: ModelRevision
    family: str
    source_segment: str
    target_segment: str
    sentence_start: bool
    seq: int
    """The pair's `TrainSegmentRow.id`: a node applies each once, replayed or sent."""
    previous_seq: int = 0
    """The engine's pair stored just before it (0: none): a node that learned less fetches the gap."""


@dataclass(frozen=True)
class ReplayStart:
    """Where a revision's replay starts: the engine's pairs numbered above `after`."""

    model: ModelRevision
    family: str
    base: int
    """The highest pair number the revision's build trained on (0: none)."""
    after: int
    """The larger of `base` and the number the node asked to start after."""


@dataclass(frozen=True)
class AlignWork:
    """Align one sentence pair with a word-alignment model revision."""

    model: ModelRevision
    family: str
    source_segment: str
    target_segment: str
    sender: Sender = UNKNOWN_SENDER


@dataclass(frozen=True)
class Served(Generic[T]):
    """An answer and the model revision that gave it: during a hot swap an older revision may
    still answer, and clients can see which (`X-Model-Revision`)."""

    value: T
    revision: int
