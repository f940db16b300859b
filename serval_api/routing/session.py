"""One node session: the live stream between an inference node and this API service."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from serval.inference.v1 import node_pb2
from serval_api.routing.held import HeldModels
from serval_common.families import DEFAULT_NODE_FAMILY
from serval_common.model_revision import ModelRevision

DRAIN_ORDER_HOLD_S = 5.0
"""How long heartbeats contradicting an admin's drain or undrain are ignored (sent before the node heard)."""


class NodeGone(Exception):
    """The node session ended while work was outstanding on it."""


USAGE_OWNERS = 5
"""How many owners a node's usage names (the busiest); owners have no bound."""


@dataclass(frozen=True)
class OwnerUse:
    """One owner's work in flight on a node from this replica, by class."""

    owner: str
    interactive: int = 0
    bulk: int = 0


@dataclass
class NodeSession:
    session_id: str
    node_id: str
    device: node_pb2.DeviceInfo
    slots: int
    token_id: str = ""
    software_version: str = ""
    families: frozenset[str] = frozenset({DEFAULT_NODE_FAMILY.name})
    """The engine families the node serves (from Hello; an older node serves `nmt` only)."""
    outbox: asyncio.Queue[node_pb2.ApiMessage | node_pb2.WorkItem] = field(default_factory=asyncio.Queue)
    """What to write to the node, in order (a bare `WorkItem` is work: `stream_batches` coalesces it)."""
    batches: bool = False
    """Whether the node reads `WorkItems` (its Hello said so)."""
    models: HeldModels = field(default_factory=HeldModels, repr=False)
    """The revisions the node holds and the weights they share, as it reported them."""
    model_errors: dict[str, str] = field(default_factory=dict, repr=False)
    """Model location → why its load failed, or the last failed attempt while it is retried."""
    failed_at: dict[str, float] = field(default_factory=dict, repr=False)
    """Model location → when (monotonic) the node reported its load FAILED."""
    pending: dict[str, asyncio.Future[node_pb2.WorkResult]] = field(default_factory=dict, repr=False)
    senders: dict[str, tuple[str, bool]] = field(default_factory=dict, repr=False)
    """Request id → (owner, bulk) of each work item in `pending`: who uses the node (`usage`)."""
    last_seen: float = field(default_factory=time.monotonic)
    last_heartbeat_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    busy_elsewhere: int = 0
    """Slots taken by work this session did not send (other API replicas', or this replica's before
    the node reconnected), as the node last reported; `free_slots` follows each report."""
    memory_free_bytes: int = 0
    """What more models may take on the node, as it last reported; 0 = unknown."""
    draining: bool = False
    closed: bool = False
    _drain_order: tuple[bool, float] | None = field(default=None, repr=False)
    """An admin's drain (True) or undrain (False) the node has not yet confirmed, and until when
    heartbeats saying otherwise are taken as sent before the node heard of it."""
    pushing: dict[str, int] = field(default_factory=dict)
    """Revision location → the newest pair number sent to the node as work and not yet answered:
    catching up waits for it (`LearningSync`)."""
    kicked: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    kick_reason: str = ""

    @property
    def free_slots(self) -> int:
        return self.slots - self.busy_elsewhere - len(self.pending)

    def accepts_work(self) -> bool:
        return not self.closed and not self.draining and self.free_slots > 0

    @property
    def in_flight(self) -> int:
        """Work on the node from every replica, as far as this replica knows."""
        return self.busy_elsewhere + len(self.pending)

    def heard_capacity(self, free_slots: int, slots: int = 0, session_in_flight: int | None = None) -> None:
        """The node reported its free slots (Hello or heartbeat). A node that also reports its
        `slots` reports the work of this session it runs (`session_in_flight`): the rest of what is
        not free is work from elsewhere, and this session's work in transit either way is counted
        once, in `pending`. An older node reports neither: it has at least as many slots as it ever
        had free, and this session's work counts as all received."""
        if slots > 0:
            self.slots = slots
        else:
            self.slots = max(self.slots, free_slots)
        own = len(self.pending) if session_in_flight is None else session_in_flight
        self.busy_elsewhere = max(0, self.slots - max(0, free_slots) - max(0, own))

    def order_drain(self, draining: bool, reason: str = "") -> None:
        """Drain (or undrain) the node: routing here follows at once, and the node is told."""
        self.draining = draining
        self._drain_order = (draining, time.monotonic() + DRAIN_ORDER_HOLD_S)
        if draining:
            self.send(node_pb2.ApiMessage(drain=node_pb2.Drain(reason=reason)))
        else:
            self.send(node_pb2.ApiMessage(undrain=node_pb2.Undrain()))

    def heard_draining(self, draining: bool) -> bool:
        """The node's heartbeat says whether it is draining; whether routing state changed."""
        if self._drain_order is not None:
            ordered, until = self._drain_order
            if draining != ordered and time.monotonic() < until:
                return False
            self._drain_order = None
        changed = draining != self.draining
        self.draining = draining
        return changed

    def kick(self, reason: str) -> None:
        """End the session from this side (e.g. its node token was revoked)."""
        self.kick_reason = reason
        self.kicked.set()

    def model_state(self, location: str) -> int:
        """The revision's own state on the node."""
        return self.models.state(location)

    def trained_through(self, location: str) -> int | None:
        """The pair number the node's READY model of the revision has learned up to (families that
        learn segments); None otherwise."""
        return self.models.trained_through(location)

    def serves(self, model: ModelRevision) -> int:
        """The revision's state counting its weights: READY when the node holds them under any
        revision (work for it needs no load), see `HeldModels.serves`."""
        return self.models.serves(model)

    def send(self, message: node_pb2.ApiMessage) -> None:
        self.outbox.put_nowait(message)

    def load(self, model: ModelRevision) -> None:
        """Ask the node to load `model`; until it says otherwise the model counts as loading."""
        self.models.set(model.location, node_pb2.MODEL_STATE_LOADING, model.weights)
        self.send(node_pb2.ApiMessage(load_model=node_pb2.LoadModel(model=model_ref(model))))

    def unload(self, model: ModelRevision) -> None:
        """Route nothing more to `model` here and ask the node to unload it once its work is done."""
        self.models.remove(model.location)
        self.model_errors.pop(model.location, None)
        self.send(node_pb2.ApiMessage(unload_model=node_pb2.UnloadModel(model=model_ref(model))))

    def held(self) -> list[ModelRevision]:
        """The model revisions the node holds or is loading, with their weights where known."""
        return self.models.revisions()

    def submit(self, request_id: str, item: node_pb2.WorkItem) -> asyncio.Future[node_pb2.WorkResult]:
        future: asyncio.Future[node_pb2.WorkResult] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.senders[request_id] = (item.owner, item.work_class == node_pb2.WORK_CLASS_BULK)
        self.outbox.put_nowait(item)
        return future

    def resolve(self, result: node_pb2.WorkResult) -> None:
        future = self.pending.pop(result.request_id, None)
        self.senders.pop(result.request_id, None)
        if future is not None and not future.done():
            future.set_result(result)

    def forget(self, request_id: str) -> None:
        self.pending.pop(request_id, None)
        self.senders.pop(request_id, None)

    def usage(self, most: int = USAGE_OWNERS) -> list[OwnerUse]:
        """The owners whose work this session has on the node now, the busiest first (at most
        `most`): who uses the node, as the admin console shows it."""
        uses: dict[str, OwnerUse] = {}
        for owner, bulk in self.senders.values():
            use = uses.get(owner) or OwnerUse(owner)
            uses[owner] = OwnerUse(owner, use.interactive + (not bulk), use.bulk + bulk)
        return sorted(uses.values(), key=lambda u: (-(u.interactive + u.bulk), u.owner))[:most]

    def close(self) -> None:
        self.closed = True
        for future in self.pending.values():
            if not future.done():
                future.set_exception(NodeGone(f"node {self.node_id} went away"))
        self.pending.clear()
        self.senders.clear()


def model_ref(model: ModelRevision) -> node_pb2.ModelRef:
    return node_pb2.ModelRef(
        engine_id=model.engine_id, revision=model.revision, location=model.location, weights=model.weights
    )
