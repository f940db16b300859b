"""What the routing layer records about inference nodes."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from serval_api.db.database import Database
from serval_api.db.models import NodeRow, NodeSessionRow, NodeTokenRow, utcnow
from serval_api.errors import NotFound

CONNECTED = "connected"
GONE = "gone"


class NodeDevice(Protocol):
    """The device a node reported (`DeviceInfo` in its Hello)."""

    @property
    def kind(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def compute_type(self) -> str: ...


class RecordedSession(Protocol):
    """What a node session's row records of it; the routing layer's `NodeSession` is one. A
    protocol so the database layer does not depend on the routing layer."""

    @property
    def session_id(self) -> str: ...
    @property
    def node_id(self) -> str: ...
    @property
    def device(self) -> NodeDevice: ...
    @property
    def slots(self) -> int: ...
    @property
    def token_id(self) -> str: ...
    @property
    def software_version(self) -> str: ...


async def upsert_node(
    db: Database,
    node_id: str,
    *,
    device: str = "",
    session_id: str | None = None,
    api_instance_id: str | None = None,
    software_version: str | None = None,
    free_slots: int = 0,
    status: str = CONNECTED,
    token_id: str | None = None,
) -> NodeRow:
    """Record the node's session (one row per session, see `NodeSessionRow`); the returned row
    tells whether an admin drained it. Replicas recording the same new node at once: one inserts
    it, the other retries as an update."""
    for attempt in range(2):
        try:
            async with db.session() as s:
                node = await s.get(NodeRow, node_id, with_for_update=True)
                if node is None:
                    node = NodeRow(id=node_id, status=status)
                    s.add(node)
                    await s.flush()
                node.status = status
                node.device = device
                node.session_id = session_id
                node.api_instance_id = api_instance_id
                node.software_version = software_version
                node.free_slots = free_slots
                node.token_id = token_id
                node.last_seen = utcnow()
                if session_id is not None:
                    s.add(
                        NodeSessionRow(
                            session_id=session_id, node_id=node_id, api_instance_id=api_instance_id or ""
                        )
                    )
                return node
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")


async def mark_node_gone(db: Database, node_id: str, session_id: str) -> None:
    """The session ended: the node is gone once it has no session with any replica."""
    async with db.session() as s:
        node = await s.get(NodeRow, node_id, with_for_update=True)  # closers of one node take turns
        await s.execute(delete(NodeSessionRow).where(NodeSessionRow.session_id == session_id))
        left = await s.scalar(
            select(func.count()).select_from(NodeSessionRow).where(NodeSessionRow.node_id == node_id)
        )
        if node is not None and not left:
            node.status, node.free_slots, node.last_seen = GONE, 0, utcnow()


async def set_drain(db: Database, node_id: str, reason: str | None) -> NodeRow:
    """Drain the node (`reason`) or undrain it (None); NotFound if it never connected."""
    async with db.session() as s:
        node = await s.get(NodeRow, node_id)
        if node is None:
            raise NotFound(f"node {node_id} not found")
        node.drain_reason = reason
        return node


async def get_node(db: Database, node_id: str) -> NodeRow | None:
    async with db.session() as s:
        return await s.get(NodeRow, node_id)


async def revoked_node_tokens(db: Database, token_ids: Collection[str]) -> set[str]:
    """Those of `token_ids` that are revoked or no longer exist."""
    wanted = set(token_ids)
    if not wanted:
        return set()
    async with db.session() as s:
        valid = await s.scalars(
            select(NodeTokenRow.id).where(NodeTokenRow.id.in_(wanted), NodeTokenRow.revoked_at.is_(None))
        )
        return wanted - set(valid.all())


async def mark_all_nodes_gone(db: Database, api_instance_id: str) -> None:
    """At start-up: this replica has no sessions (an earlier run of it may have left some); nodes
    with no session with another replica are gone."""
    async with db.session() as s:
        await s.execute(delete(NodeSessionRow).where(NodeSessionRow.api_instance_id == api_instance_id))
        live = select(NodeSessionRow.node_id)
        await s.execute(
            update(NodeRow)
            .where(NodeRow.status != GONE, NodeRow.id.not_in(live))
            .values(status=GONE, free_slots=0)
        )


async def count_connected_nodes(db: Database) -> int:
    async with db.session() as s:
        return int(
            await s.scalar(select(func.count()).select_from(NodeRow).where(NodeRow.status == CONNECTED)) or 0
        )


async def list_nodes(db: Database) -> list[NodeRow]:
    async with db.session() as s:
        return list((await s.scalars(select(NodeRow).order_by(NodeRow.id))).all())


class DatabaseNodeRecords:
    """Records node sessions as rows of `nodes` (see `routing.node_api.NodeRecords`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def opened(self, session: RecordedSession, api_instance_id: str) -> str | None:
        node = await upsert_node(
            self.db,
            session.node_id,
            device=device_name(session),
            session_id=session.session_id,
            api_instance_id=api_instance_id,
            software_version=session.software_version,
            free_slots=session.slots,
            token_id=session.token_id or None,
        )
        return node.drain_reason

    async def closed(self, session: RecordedSession) -> None:
        await mark_node_gone(self.db, session.node_id, session.session_id)


def device_name(session: RecordedSession) -> str:
    device = session.device
    return f"{device.kind}:{device.index} {device.compute_type}".replace("\x00", "")[:200]
