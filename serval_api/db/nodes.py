"""What the routing layer records about inference nodes."""

from __future__ import annotations

from sqlalchemy import func, select, update

from serval_api.db.database import Database
from serval_api.db.models import Node, utcnow
from serval_api.routing.session import NodeSession

CONNECTED = "connected"
GONE = "gone"


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
) -> None:
    async with db.session() as s:
        node = await s.get(Node, node_id)
        if node is None:
            node = Node(id=node_id, status=status)
            s.add(node)
        node.status = status
        node.device = device
        node.session_id = session_id
        node.api_instance_id = api_instance_id
        node.software_version = software_version
        node.free_slots = free_slots
        node.last_seen = utcnow()


async def mark_node_gone(db: Database, node_id: str) -> None:
    async with db.session() as s:
        await s.execute(
            update(Node).where(Node.id == node_id).values(status=GONE, free_slots=0, last_seen=utcnow())
        )


async def mark_all_nodes_gone(db: Database) -> None:
    """At start-up: no node is connected to a replica that was just started."""
    async with db.session() as s:
        await s.execute(update(Node).where(Node.status != GONE).values(status=GONE, free_slots=0))


async def count_connected_nodes(db: Database) -> int:
    async with db.session() as s:
        return int(
            await s.scalar(select(func.count()).select_from(Node).where(Node.status == CONNECTED)) or 0
        )


async def list_nodes(db: Database) -> list[Node]:
    async with db.session() as s:
        return list((await s.scalars(select(Node).order_by(Node.id))).all())


class DatabaseNodeRecords:
    """Records node sessions as rows of `nodes` (see `routing.node_api.NodeRecords`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def opened(self, session: NodeSession, api_instance_id: str, software_version: str) -> None:
        device = f"{session.device.kind}:{session.device.index} {session.device.compute_type}"
        await upsert_node(
            self.db,
            session.node_id,
            device=device,
            session_id=session.session_id,
            api_instance_id=api_instance_id,
            software_version=software_version,
            free_slots=session.slots,
        )

    async def closed(self, session: NodeSession) -> None:
        await mark_node_gone(self.db, session.node_id)
