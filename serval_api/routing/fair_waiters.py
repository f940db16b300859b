"""Requests waiting in the API service for a node slot, served fairly.

A request that finds no free node slot for its model (or finds others already waiting) waits here.
When something changes, `wake` wakes waiters in **fair order**, and only as many as there are free
slots on nodes that could serve them:

- **interactive before bulk**: every interactive waiter (`Sender.work_class`) comes before every
  bulk waiter (a LibreTranslate list's or a long text's sentences);
- **owner by owner**: within a class, owners take turns (round robin). An owner's turn comes by how
  long ago one of its requests was last admitted (`admitted`, called for every request that gets a
  node slot, waiting or not): an owner that was never admitted, or admitted longest ago, goes
  first, so the waiting request of a new owner passes the backlog of an owner whose work fills the
  node. Each owner's own waiters keep their order (first come, first served);
- **one woken waiter per free slot**: each waiter says which sessions could serve it now (its
  model ready there, its family, not draining: `fits`); free slots are handed out in fair order to
  waiters that fit them. A waiter already woken and not yet run keeps the slot it was given, so
  the next change does not give it twice.

A **structural** change (a node connects or goes, drains, a model is loaded, failed or unloaded, an
engine retires) wakes every waiter, still in fair order (asyncio runs them in the order woken, so
the first to run take the free slots): a waiter whose model became ready, whose load failed or
whose node left must rescan, ask for a load or give up, and must never wait for a slot that will
not come. A woken waiter that finds no slot waits again in its place.

Everything here runs on the event loop without awaiting, so a wake pass sees one consistent state.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from serval_api.routing.session import NodeSession
from serval_common.aio import wait_changed
from serval_common.core import Sender, WorkClass

REMEMBERED_OWNERS = 10_000
"""How many owners' last admissions are remembered for their turns; an owner forgotten counts as
never admitted (it goes first), which only ever favours an owner who has not been served lately."""

_CLASS_ORDER = (WorkClass.INTERACTIVE, WorkClass.BULK)


@dataclass(eq=False)
class Waiter:
    """One request waiting for a node slot."""

    sender: Sender
    fits: Callable[[NodeSession], bool]
    """Whether the session could serve this request now, its free slots aside."""
    seq: int = 0
    woken: bool = False
    """Woken and not yet run: a free slot is spoken for by it."""
    _event: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def wake(self) -> None:
        self.woken = True
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Until woken, for at most `timeout_s`; False when the time ran out. Waiting again after a
        wake (no slot was left) keeps the waiter's place."""
        self.woken = False
        self._event.clear()
        return await wait_changed(self._event, timeout_s)


class FairWaiters:
    def __init__(self) -> None:
        self._waiters: dict[Waiter, None] = {}
        """Every waiter, in arrival order."""
        self._per_owner: dict[str, int] = {}
        self._admitted: OrderedDict[str, None] = OrderedDict()
        """Owners by their last admission, longest ago first."""
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._waiters)

    def __bool__(self) -> bool:
        return bool(self._waiters)

    def waiting(self, owner: str) -> int:
        """Requests of `owner` waiting now."""
        return self._per_owner.get(owner, 0)

    def add(self, sender: Sender, fits: Callable[[NodeSession], bool]) -> Waiter:
        waiter = Waiter(sender, fits, next(self._seq))
        self._waiters[waiter] = None
        self._per_owner[sender.owner] = self._per_owner.get(sender.owner, 0) + 1
        return waiter

    def remove(self, waiter: Waiter) -> None:
        if waiter not in self._waiters:
            return
        del self._waiters[waiter]
        owner = waiter.sender.owner
        left = self._per_owner[owner] - 1
        if left:
            self._per_owner[owner] = left
        else:
            del self._per_owner[owner]

    def admitted(self, owner: str) -> None:
        """A request of `owner` got a node slot: its owner's next turn comes after every other's."""
        self._admitted[owner] = None
        self._admitted.move_to_end(owner)
        if len(self._admitted) > REMEMBERED_OWNERS:
            self._admitted.popitem(last=False)

    def order(self) -> list[Waiter]:
        """Every waiter in the order it is served: interactive first, then owner by owner in turn
        (longest since admitted first), each owner's waiters first come, first served."""
        rank = {owner: i for i, owner in enumerate(self._admitted)}
        ordered: list[Waiter] = []
        for work_class in _CLASS_ORDER:
            per_owner: dict[str, list[Waiter]] = {}
            for waiter in self._waiters:
                if waiter.sender.work_class is work_class:
                    per_owner.setdefault(waiter.sender.owner, []).append(waiter)
            owners = sorted(per_owner, key=lambda o: (rank.get(o, -1), per_owner[o][0].seq))
            queues = [per_owner[o] for o in owners]
            for turn in itertools.zip_longest(*queues):
                ordered.extend(w for w in turn if w is not None)
        return ordered

    def wake(self, sessions: Sequence[NodeSession], *, everyone: bool = False) -> list[Waiter]:
        """Wake waiters in fair order: as many as there are free slots on sessions that fit them
        (`everyone`: a structural change, every waiter). The waiters woken now."""
        if not self._waiters:
            return []
        if everyone:
            woken = [w for w in self.order() if not w.woken]
            for waiter in woken:
                waiter.wake()
            return woken
        free = {s.session_id: s.free_slots for s in sessions if s.accepts_work()}
        if sum(free.values()) <= 0:
            return []  # the common case under load: a node answered, its slot taken at once
        ordered = self.order()
        open_sessions = [s for s in sessions if free.get(s.session_id, 0) > 0]

        def take(waiter: Waiter) -> bool:
            for session in open_sessions:
                if free[session.session_id] > 0 and waiter.fits(session):
                    free[session.session_id] -= 1
                    return True
            return False

        for waiter in ordered:
            if waiter.woken:  # on its way: the slot it was given stays its own
                take(waiter)
        woken = []
        for waiter in ordered:
            if sum(free.values()) <= 0:
                break
            if not waiter.woken and take(waiter):
                waiter.wake()
                woken.append(waiter)
        return woken
