"""`/api/v1/admin/nodes`: the inference nodes an admin lists and controls (drain and undrain,
load and unload an engine's model revision), and the `Node` shape the web console's overview
shows them in (`admin_console.py`). For callers with the `admin` scope.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, status

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.protocol import Model
from serval_api.service import admin, admin_engines
from serval_api.service.context import Services

router = APIRouter(prefix="/api/v1/admin", tags=["Admin"])


class NodeModel(Model):
    engine_id: str
    revision: int
    state: str
    message: str = ""
    size_bytes: int = 0
    """The loaded model's size: the same for every revision sharing its weights."""
    weights: str = ""
    """The weights identity the revision serves: revisions with the same one share one loaded model."""
    trained_through: int | None = None
    """smt-transfer: the number of the engine's trained segment the READY model has learned up to
    (every segment up to it is in the model)."""
    engine_name: str | None = None
    """The engine's name, where it has one."""
    base_model: str | None = None
    """A base model served as it is, with no engine (`engineId` "", revision 0): its name."""


class NodeOwnerWork(Model):
    """One owner's requests on the node now (sent by this API replica), by work class."""

    owner: str
    interactive: int = 0
    bulk: int = 0


class Node(Model):
    id: str
    status: str
    device: str
    free_slots: int
    last_seen: datetime
    slots: int = 0
    in_flight: int = 0
    memory_total_bytes: int = 0
    memory_free_bytes: int = 0
    drained: bool = False
    drain_reason: str | None = None
    models: list[NodeModel] = []
    loaded_models: int = 0
    """Sets of weights held (or loading): revisions sharing weights count once."""
    memory_held_bytes: int = 0
    """Memory of the models held, each set of weights counted once."""
    software_version: str | None = None
    api_instance_id: str | None = None
    token_id: str | None = None
    work_by_owner: list[NodeOwnerWork] = []
    """Who uses the node: the owners whose requests this replica has on it now, the busiest first
    (at most 5), interactive and bulk."""


class NodeDrainConfig(Model):
    reason: str = ""


class NodeEngineConfig(Model):
    engine_id: str
    revision: int | None = None


@router.get("/nodes", response_model=list[Node], response_model_exclude_none=True)
async def list_nodes(services: ServicesDep, caller: CallerDep) -> list[Node]:
    return await node_dtos(services, await admin.list_nodes(services, caller))


@router.get("/nodes/{node_id}", response_model=Node, response_model_exclude_none=True)
async def get_node(node_id: str, services: ServicesDep, caller: CallerDep) -> Node:
    [node] = await node_dtos(services, [await admin.get_node(services, caller, node_id)])
    return node


@router.post("/nodes/{node_id}/drain", response_model=Node, response_model_exclude_none=True)
async def drain_node(
    node_id: str, services: ServicesDep, caller: CallerDep, config: NodeDrainConfig | None = None
) -> Node:
    reason = config.reason if config is not None else ""
    [node] = await node_dtos(services, [await admin.drain_node(services, caller, node_id, reason)])
    return node


@router.post("/nodes/{node_id}/undrain", response_model=Node, response_model_exclude_none=True)
async def undrain_node(node_id: str, services: ServicesDep, caller: CallerDep) -> Node:
    [node] = await node_dtos(services, [await admin.undrain_node(services, caller, node_id)])
    return node


@router.post(
    "/nodes/{node_id}/models",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Node,
    response_model_exclude_none=True,
)
async def load_engine(
    node_id: str, config: NodeEngineConfig, services: ServicesDep, caller: CallerDep
) -> Node:
    """Pre-warm: the node starts loading the engine's revision; poll the node to see it ready."""
    [node] = await node_dtos(
        services, [await admin.load_engine(services, caller, node_id, config.engine_id, config.revision)]
    )
    return node


@router.delete("/nodes/{node_id}/models/{engine_id}", response_model=Node, response_model_exclude_none=True)
async def unload_engine(node_id: str, engine_id: str, services: ServicesDep, caller: CallerDep) -> Node:
    [node] = await node_dtos(services, [await admin.unload_engine(services, caller, node_id, engine_id)])
    return node


async def node_dtos(services: Services, views: list[admin.NodeView]) -> list[Node]:
    """`views` as the API answers them, each revision a node holds with its engine's name."""
    names = await admin_engines.engine_names(services, [m.engine_id for v in views for m in v.models])
    return [node_dto(view, names) for view in views]


def node_dto(view: admin.NodeView, engine_names: dict[str, str] | None = None) -> Node:
    names = engine_names or {}
    return Node(
        id=view.id,
        status=view.status,
        device=view.device,
        free_slots=view.free_slots,
        last_seen=view.last_seen,
        slots=view.slots,
        in_flight=view.in_flight,
        memory_total_bytes=view.memory_total_bytes,
        memory_free_bytes=view.memory_free_bytes,
        drained=view.drained,
        drain_reason=view.drain_reason,
        models=[
            NodeModel(
                engine_id=m.engine_id,
                revision=m.revision,
                state=m.state,
                message=m.message,
                size_bytes=m.size_bytes,
                weights=m.weights,
                trained_through=m.trained_through,
                engine_name=names.get(m.engine_id),
                base_model=m.base_model or None,
            )
            for m in view.models
        ],
        loaded_models=view.loaded_models,
        memory_held_bytes=view.memory_held_bytes,
        software_version=view.software_version,
        api_instance_id=view.api_instance_id,
        token_id=view.token_id,
        work_by_owner=[
            NodeOwnerWork(owner=u.owner, interactive=u.interactive, bulk=u.bulk) for u in view.usage
        ],
    )
