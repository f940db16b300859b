"""Catching up on trained segments: every node applies every pair, wherever it was trained.

A pair sent with train-segment is stored first, then pushed as work to the nodes of the replica
that took the request (`train_fanout.TrainSegmentFanOut`). A push can miss a node: one connected
only to other replicas, one away or slow at the time, one whose session began after an API
restart, one still loading the revision. So the push is only the fast path; what makes every
node learn every pair is the database and the node itself:

- every node reports, with each READY model of a family that learns segments, the pair number it
  has learned up to (`ModelStatus.trained_through`): every pair of the engine up to that number
  is in the model, since the node applies pairs in order and fetches any gap itself;
- every replica compares what its sessions report with the number of each engine's last stored
  pair (`last_pairs`, one grouped query) and sends a node that has learned less a `CatchUp`; the
  node fetches what it lacks (`StreamTrainSegments` after its number) and applies it.

A replica checks when a node reports a model READY (a load, a reconnect after a restart), shortly
after it hears an engine changed (a pair stored through any replica; on PostgreSQL through
LISTEN/NOTIFY, after `SETTLE_S` so the push usually lands first), and every
`api.train_segment_check_s` whatever it heard (notifications are best effort). A node that has
the pair on its way as work is left alone until it answers, and the same node is not asked again
for the same number within one check interval. A node that already has what it is asked for
ignores the message, and applies each pair number once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from serval.inference.v1 import node_pb2
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeSession, model_ref
from serval_common.aio import wait_changed
from serval_common.model_revision import ModelRevision

log = logging.getLogger(__name__)

LastPairs = Callable[[set[str]], Awaitable[dict[str, int]]]
"""Engine id → the number of its last stored pair, for those of the given engines that have any."""

SETTLE_S = 1.0
"""How long after hearing an engine changed its nodes are checked: the replica that stored the pair
pushes it meanwhile, and the nodes' new numbers usually arrive before the check."""
ENGINE_KEY = "engine:"


class LearningSync:
    def __init__(
        self,
        registry: NodeRegistry,
        last_pairs: LastPairs,
        *,
        interval_s: float,
        settle_s: float = SETTLE_S,
        on_catch_up: Callable[[], None] | None = None,
    ) -> None:
        self.registry = registry
        self.last_pairs = last_pairs
        self.interval_s = interval_s
        self.settle_s = settle_s
        self.on_catch_up = on_catch_up
        self._wake = asyncio.Event()
        self._due: set[str] | None = set()
        """Engines to check at the next wake; None: all."""
        self._asked: dict[tuple[str, str], tuple[int, float]] = {}
        """(session id, revision location) → the number a CatchUp asked for, and when."""
        self._ready: set[tuple[str, str]] = set()
        """(session id, revision location) of the learning models known READY: a model that becomes
        READY (a load, a reconnect) is checked at once; its later numbers need no check."""
        registry.listeners.append(self._status)

    def check_soon(self, engine_id: str | None) -> None:
        """Check the nodes holding the engine (None: every engine) at once."""
        if engine_id is None:
            self._due = None
        elif self._due is not None:
            self._due.add(engine_id)
        self._wake.set()

    def changed(self, key: str | None) -> None:
        """A `ChangeNotifier` listener: an engine changed (a pair may have been stored through any
        replica), or anything may have (None)."""
        if key is None:
            self.check_soon(None)
        elif key.startswith(ENGINE_KEY):
            engine_id = key[len(ENGINE_KEY) :]
            if any(k.engine_id == engine_id for s in self.registry.sessions() for k in s.held()):
                try:
                    asyncio.get_running_loop().call_later(self.settle_s, self.check_soon, engine_id)
                except RuntimeError:  # not on the event loop: check at once
                    self.check_soon(engine_id)

    def _status(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        key = (session.session_id, status.model.location)
        if status.state != node_pb2.MODEL_STATE_READY or not status.HasField("trained_through"):
            self._ready.discard(key)
        elif key not in self._ready:
            self._ready.add(key)
            self.check_soon(status.model.engine_id)

    async def run(self) -> None:
        """Check when woken and every `interval_s`; a failed check is logged and tried again."""
        while True:
            woken = await wait_changed(self._wake, self.interval_s)
            self._wake.clear()
            due, self._due = self._due, set()
            try:
                await self.check(due if woken else None)
            except Exception as exc:  # the database may be briefly unreachable: next time
                log.warning("could not check the nodes' trained segments", extra={"error": str(exc)})

    async def check(self, engines: set[str] | None = None) -> int:
        """Send a CatchUp to every node whose READY model of `engines` (None: all) has learned less
        than its engine's last pair; how many were sent."""
        held: list[tuple[NodeSession, ModelRevision]] = []
        for session in self.registry.sessions():
            for key in session.held():
                if engines is not None and key.engine_id not in engines:
                    continue
                if (
                    session.model_state(key.location) == node_pb2.MODEL_STATE_READY
                    and session.trained_through(key.location) is not None
                ):
                    held.append((session, key))
        live = {s.session_id for s in self.registry.sessions()}
        self._asked = {k: v for k, v in self._asked.items() if k[0] in live}
        self._ready = {k for k in self._ready if k[0] in live}
        if not held:
            return 0
        last = await self.last_pairs({key.engine_id for _, key in held})
        now = time.monotonic()
        sent = 0
        for session, key in held:
            target = last.get(key.engine_id, 0)
            through = session.trained_through(key.location)  # read again: the query awaited
            asked_key = (session.session_id, key.location)
            if session.closed or through is None or through >= target:
                self._asked.pop(asked_key, None)
                continue
            if session.pushing.get(key.location, 0) >= target:
                continue  # on its way as work
            asked = self._asked.get(asked_key)
            if asked is not None and asked[0] >= target and now - asked[1] < self.interval_s:
                continue
            session.send(node_pb2.ApiMessage(catch_up=node_pb2.CatchUp(model=model_ref(key), through=target)))
            self._asked[asked_key] = (target, now)
            sent += 1
            if self.on_catch_up is not None:
                self.on_catch_up()
            log.info(
                "asked a node to catch up on trained segments",
                extra={
                    "node_id": session.node_id,
                    "model": key.location,
                    "trained_through": through,
                    "last_pair": target,
                },
            )
        return sent
