"""Which queued requests of one decoding key go into a model's next batch: owners take turns, and
interactive work goes first (the micro-batcher, `inference_gpu/batcher.py`, keeps one `FairQueue`
per decoding key).

- **Interactive before bulk.** A request someone waits for (translate, n-best, prefix, word graph,
  a sentence from SIL Converters) goes before bulk work (one of many sentences a request sent at
  once: a LibreTranslate list, a long text; `serval_common.core.sender` decides which). Bulk is
  never starved: while bulk requests wait, at least one slot in `1 / BULK_FLOOR` goes to them
  however many interactive requests fill the batches.
- **Owners take turns.** Within a class, the owners with queued requests take turns by deficit
  round robin (Shreedhar & Varghese, 1995): an owner's turn adds its weight to its deficit, and it
  takes one request per whole unit of deficit, keeping the fraction for its next turn. An owner
  whose queue empties leaves the round and its deficit is dropped; an owner not in the round joins
  it at the back with a turn's deficit, so its request goes into the next batch after at most one
  turn of each owner already waiting, never behind another owner's backlog. An owner alone takes
  every slot (the queue is work-conserving); weight 2 beside weight 1 takes exactly 2 of every 3.
- **Weights** come from a plain mapping read at every turn (the node's `node.batch_weights`, which
  an administrator sets): `key:<API key id>` or `owner:<owner id>` → weight, default 1. An owner's
  turn uses the weight of the request at the head of its queue, so a key with its own weight
  weighs its owner's turns while that key's requests are served.
- Requests without an owner (from an API service of an earlier release) are one owner, "", served
  first come, first served as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Generic, Protocol, TypeVar

from serval_common.core import Sender

DEFAULT_WEIGHT = 1.0
MIN_WEIGHT = 0.01
"""Smaller weights (a mistake: the settings refuse 0) count as this, so a turn always ends."""
BULK_FLOOR = 1 / 32
"""While bulk requests wait, every interactive request served earns them this much of a slot: one
bulk request goes in every 33 slots at the least, a 3% share that costs interactive requests
little and guarantees a long text progress beside a flood of interactive ones."""


class Waiting(Protocol):
    @property
    def sender(self) -> Sender: ...

    @property
    def queued_at(self) -> float: ...

    @property
    def gone(self) -> bool:
        """Nobody waits for the answer any more (the caller cancelled, or it was answered)."""


T = TypeVar("T", bound=Waiting)


def weight_of(weights: Mapping[str, float], sender: Sender) -> float:
    """The sender's share of turns: its API key's weight, else its owner's, else 1."""
    if not weights:
        return DEFAULT_WEIGHT
    weight = weights.get(f"key:{sender.key_id}") if sender.key_id else None
    if weight is None:
        weight = weights.get(f"owner:{sender.owner}", DEFAULT_WEIGHT)
    return max(MIN_WEIGHT, weight)


class OwnerRounds(Generic[T]):
    """One class's queued requests of one decoding key, a queue per owner, served by deficit round
    robin (see the module docstring)."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        self._weights = weights
        self._queues: dict[str, deque[T]] = {}
        self._turns: deque[str] = deque()
        """Owners with queued requests; the first is the one whose turn it is."""
        self._deficit: dict[str, float] = {}
        self.size = 0
        """Requests queued, those whose caller is gone included until they reach a queue's head."""

    def push(self, item: T) -> None:
        owner = item.sender.owner
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = deque()
            self._turns.append(owner)
            self._deficit[owner] = weight_of(self._weights, item.sender)
        queue.append(item)
        self.size += 1

    def pop(self) -> T | None:
        """The next request by the owners' turns; None when none is queued."""
        while self._turns:
            owner = self._turns[0]
            queue = self._live(owner)
            if not queue:
                self._leave(owner)
            elif self._deficit[owner] >= 1:
                self._deficit[owner] -= 1
                self.size -= 1
                item = queue.popleft()
                if not queue:
                    self._leave(owner)
                return item
            else:  # its turn is spent: to the back of the round, with its next turn's deficit
                self._turns.rotate(-1)
                self._deficit[owner] += weight_of(self._weights, queue[0].sender)
        return None

    def oldest(self) -> float | None:
        """When the longest-waiting live request was queued; None when none is."""
        heads = [queue[0].queued_at for owner in list(self._turns) if (queue := self._live(owner))]
        return min(heads, default=None)

    def __iter__(self) -> Iterator[T]:
        for queue in self._queues.values():
            yield from queue

    def _live(self, owner: str) -> deque[T]:
        """The owner's queue without the requests at its head whose caller is gone."""
        queue = self._queues[owner]
        while queue and queue[0].gone:
            queue.popleft()
            self.size -= 1
        return queue

    def _leave(self, owner: str) -> None:
        """The owner has no request left: out of the round, its deficit dropped (DRR's rule, so an
        owner cannot save turns up while it is idle)."""
        self.size -= len(self._queues.pop(owner))
        self._turns.remove(owner)
        del self._deficit[owner]


class FairQueue(Generic[T]):
    """The queued requests of one decoding key: interactive before bulk, owners taking turns."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        self._interactive: OwnerRounds[T] = OwnerRounds(weights)
        self._bulk: OwnerRounds[T] = OwnerRounds(weights)
        self._bulk_credit = 0.0
        """Slots owed to waiting bulk requests (see `BULK_FLOOR`)."""

    def __len__(self) -> int:
        return self._interactive.size + self._bulk.size

    def __iter__(self) -> Iterator[T]:
        yield from self._interactive
        yield from self._bulk

    def push(self, item: T) -> None:
        (self._bulk if item.sender.bulk else self._interactive).push(item)

    def oldest(self) -> float | None:
        """When the longest-waiting live request was queued; None when none is."""
        return min(
            (t for t in (self._interactive.oldest(), self._bulk.oldest()) if t is not None), default=None
        )

    def take(self, limit: int) -> list[T]:
        """Up to `limit` live requests for the next batch, in the order of their turns."""
        batch: list[T] = []
        while len(batch) < limit and (item := self._next()) is not None:
            batch.append(item)
        return batch

    def _next(self) -> T | None:
        if self._bulk_credit >= 1 and (item := self._bulk.pop()) is not None:
            self._bulk_credit -= 1
            return item
        item = self._interactive.pop()
        if item is None:
            return self._bulk.pop()
        self._bulk_credit = self._bulk_credit + BULK_FLOOR if self._bulk.size else 0.0
        return item
