"""Administration over the API: API keys, node tokens, nodes. Every function needs the `admin` scope.

`serval admin api-key|node-token …` do the same on the database directly, so a fresh install is
never locked out; node control (`serval admin nodes …`) needs a running API service.

Nodes are listed as this replica sees them live (every node keeps a session with every replica),
with the database's record for nodes not connected here: `status` is "serving", "draining",
"connected" (to another replica only) or "gone".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from serval.inference.v1 import node_pb2
from serval_api.auth import ADMIN, Caller, KeyLimits
from serval_api.db import nodes as node_rows
from serval_api.db.models import ApiKeyRow, EngineRow, NodeRow, NodeTokenRow
from serval_api.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from serval_api.routing.fleet import Fleet
from serval_api.routing.session import NodeSession, OwnerUse
from serval_api.service import keys
from serval_api.service.changes import API_KEYS, NODE_TOKENS
from serval_api.service.context import Services
from serval_common.model_revision import ModelRevision

MODEL_STATES: dict[int, str] = {
    node_pb2.MODEL_STATE_LOADING: "loading",
    node_pb2.MODEL_STATE_READY: "ready",
    node_pb2.MODEL_STATE_FAILED: "failed",
}


@dataclass(frozen=True)
class NodeModelView:
    engine_id: str
    revision: int
    state: str
    message: str = ""
    size_bytes: int = 0
    """The loaded model's size: revisions sharing `weights` share it (count it once)."""
    weights: str = ""
    """The weights identity the revision serves; "" while the node has not said."""
    trained_through: int | None = None
    """Families that learn segments: the pair number the READY model has learned up to."""
    base_model: str = ""
    """A base model served as it is (no engine: `engine_id` "" and revision 0): its name."""


@dataclass(frozen=True)
class NodeView:
    id: str
    status: str
    device: str
    last_seen: datetime
    slots: int = 0
    free_slots: int = 0
    in_flight: int = 0
    memory_total_bytes: int = 0
    memory_free_bytes: int = 0
    drain_reason: str | None = None
    software_version: str | None = None
    api_instance_id: str | None = None
    token_id: str | None = None
    models: list[NodeModelView] = field(default_factory=list)
    loaded_models: int = 0
    """Sets of weights held or loading (revisions sharing weights count once)."""
    memory_held_bytes: int = 0
    usage: list[OwnerUse] = field(default_factory=list)
    """The owners whose work is on the node from this replica now, busiest first (`NodeSession.usage`)."""

    @property
    def drained(self) -> bool:
        return self.drain_reason is not None


_SCOPE = re.compile(r"^[a-z_]+(:[a-z_]+)?$")
MAX_NAME_CHARS = 200


async def create_api_key(
    services: Services,
    caller: Caller,
    owner: str,
    scopes: Iterable[str],
    engine_id: str | None = None,
    overrides: KeyLimits | None = None,
) -> tuple[ApiKeyRow, str]:
    """`engine_id` binds the key to one of `owner`'s translation engines: the dialects that name
    no engine (SIL Converters, LibreTranslate) then translate with it. `overrides`: the key's own
    per-key limits in place of the settings (`service/quotas.py`)."""
    caller.require(ADMIN)
    wanted = list(scopes)
    if not wanted:
        raise InvalidArgument("scopes: name at least one scope")
    bad = [s for s in wanted if not _SCOPE.match(s)]
    if bad:
        raise InvalidArgument(f"scopes: not a scope name: {', '.join(map(repr, bad))}")
    if len(owner) > MAX_NAME_CHARS:
        raise InvalidArgument(f"owner: at most {MAX_NAME_CHARS} characters")
    if engine_id:
        await keys.check_bindable_engine(services.db, owner, engine_id)
    if overrides is not None:
        keys.check_limits(overrides)
    return await keys.create_api_key(
        services.db, owner, wanted, engine_id=engine_id or None, overrides=overrides
    )


async def set_api_key_limits(
    services: Services, caller: Caller, key_id: str, overrides: KeyLimits
) -> ApiKeyRow:
    """Replace one key's limit overrides; every replica uses them once it hears of the change."""
    caller.require(ADMIN)
    record = await keys.set_api_key_limits(services.db, key_id, overrides)
    services.changes.notify(API_KEYS)
    return record


async def list_api_keys(services: Services, caller: Caller, owner: str | None = None) -> list[ApiKeyRow]:
    caller.require(ADMIN)
    return await keys.list_api_keys(services.db, owner)


async def revoke_api_key(services: Services, caller: Caller, key_id: str) -> None:
    caller.require(ADMIN)
    await keys.revoke_api_key(services.db, key_id)
    services.changes.notify(API_KEYS)


async def create_node_token(services: Services, caller: Caller, name: str) -> tuple[NodeTokenRow, str]:
    caller.require(ADMIN)
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"name: 1 to {MAX_NAME_CHARS} characters")
    return await keys.create_node_token(services.db, name)


async def list_node_tokens(services: Services, caller: Caller) -> list[NodeTokenRow]:
    caller.require(ADMIN)
    return await keys.list_node_tokens(services.db)


async def revoke_node_token(services: Services, caller: Caller, token_id: str) -> None:
    """Nodes using the token are disconnected at once, here and (told through the change
    notifications) on the other replicas."""
    caller.require(ADMIN)
    await keys.revoke_node_token(services.db, token_id)
    if services.fleet is not None:
        services.fleet.disconnect_tokens({token_id})
    services.changes.notify(NODE_TOKENS)


async def list_nodes(services: Services, caller: Caller) -> list[NodeView]:
    caller.require(ADMIN)
    live = services.fleet.sessions() if services.fleet is not None else {}
    rows = {row.id: row for row in await node_rows.list_nodes(services.db)}
    return [
        _view(rows.get(node_id), live.get(node_id), node_id) for node_id in sorted(rows.keys() | live.keys())
    ]


async def get_node(services: Services, caller: Caller, node_id: str) -> NodeView:
    caller.require(ADMIN)
    row = await node_rows.get_node(services.db, node_id)
    session = _fleet(services).sessions().get(node_id)
    if row is None and session is None:
        raise NotFound(f"node {node_id} not found")
    return _view(row, session, node_id)


async def drain_node(services: Services, caller: Caller, node_id: str, reason: str) -> NodeView:
    """No new work goes to the node (its work in flight finishes) until it is undrained, across
    node restarts too."""
    caller.require(ADMIN)
    if len(reason) > MAX_NAME_CHARS:
        raise InvalidArgument(f"reason: at most {MAX_NAME_CHARS} characters")
    await node_rows.set_drain(services.db, node_id, reason or "drained by an admin")
    await _fleet(services).drain(node_id, reason or "drained by an admin")
    return await get_node(services, caller, node_id)


async def undrain_node(services: Services, caller: Caller, node_id: str) -> NodeView:
    caller.require(ADMIN)
    await node_rows.set_drain(services.db, node_id, None)
    await _fleet(services).undrain(node_id)
    return await get_node(services, caller, node_id)


async def load_engine(
    services: Services, caller: Caller, node_id: str, engine_id: str, revision: int | None = None
) -> NodeView:
    """Pre-warm: the node loads the engine's current revision (or `revision`); the answer shows it
    loading, and `list_nodes` shows when it is ready or why it failed."""
    caller.require(ADMIN)
    async with services.db.session() as s:
        engine = await s.get(EngineRow, engine_id)
    if engine is None:
        raise NotFound(f"engine {engine_id} not found")
    wanted = engine.model_revision if revision is None else revision
    if wanted < 1 or wanted > engine.model_revision:
        raise FailedPrecondition(
            f"engine {engine_id} has no model revision {wanted} (its current revision is "
            f"{engine.model_revision}; build it first)"
        )
    session = _connected(services, node_id)
    if session.draining:
        raise FailedPrecondition(f"node {node_id} is draining; undrain it first")
    # The current revision's weights are known: a node holding them aliases it without a load.
    weights = (engine.model_weights or "") if wanted == engine.model_revision else ""
    _fleet(services).load(session, ModelRevision(engine_id, wanted, weights))
    return _view(await node_rows.get_node(services.db, node_id), session, node_id)


async def unload_engine(services: Services, caller: Caller, node_id: str, engine_id: str) -> NodeView:
    """The node unloads every revision of the engine it holds, once their work in flight is done.
    The engine's next request may load it again on the least-loaded node: drain the node first to
    keep it free."""
    caller.require(ADMIN)
    session = _connected(services, node_id)
    if not _fleet(services).unload(session, engine_id):
        raise NotFound(f"node {node_id} holds no revision of engine {engine_id}")
    return _view(await node_rows.get_node(services.db, node_id), session, node_id)


def _fleet(services: Services) -> Fleet:
    if services.fleet is None:
        raise Unavailable("this API service routes no inference nodes")
    return services.fleet


def _connected(services: Services, node_id: str) -> NodeSession:
    session = _fleet(services).sessions().get(node_id)
    if session is None:
        raise NotFound(f"node {node_id} is not connected to this API service")
    return session


def _view(row: NodeRow | None, session: NodeSession | None, node_id: str) -> NodeView:
    drain_reason = row.drain_reason if row is not None else None
    if session is None:
        assert row is not None
        return NodeView(
            id=node_id,
            status=row.status,
            device=row.device,
            last_seen=row.last_seen,
            free_slots=row.free_slots,
            drain_reason=drain_reason,
            software_version=row.software_version,
            api_instance_id=row.api_instance_id,
            token_id=row.token_id,
        )
    device = session.device
    models = [
        NodeModelView(
            engine_id=key.engine_id,
            revision=key.revision,
            state=MODEL_STATES.get(session.model_state(key.location), "unknown"),
            message=session.model_errors.get(key.location, ""),
            size_bytes=session.models.size_of(key),
            weights=key.weights,
            trained_through=session.trained_through(key.location),
            base_model=key.base_model,
        )
        for key in sorted(session.held(), key=lambda k: (k.engine_id, k.revision))
    ]
    return NodeView(
        id=node_id,
        status="draining" if session.draining else "serving",
        device=node_rows.device_name(session),
        last_seen=session.last_heartbeat_at,
        slots=session.slots,
        free_slots=max(0, session.slots - session.in_flight),
        in_flight=session.in_flight,
        memory_total_bytes=device.memory_total_bytes,
        memory_free_bytes=session.memory_free_bytes,
        drain_reason=drain_reason,
        software_version=session.software_version or None,
        api_instance_id=row.api_instance_id if row is not None else None,
        token_id=session.token_id or None,
        models=models,
        loaded_models=len(session.models),
        memory_held_bytes=session.models.bytes_held(),
        usage=session.usage(),
    )
