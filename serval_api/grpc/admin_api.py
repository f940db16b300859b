"""serval.admin.v1.AdminApi over `service.admin`."""

from __future__ import annotations

from datetime import datetime

from google.protobuf import empty_pb2, timestamp_pb2
from grpc.aio import ServicerContext as Context

from serval.admin.v1 import admin_pb2, admin_pb2_grpc
from serval_api.auth import KEY_LIMIT_FIELDS, Caller, KeyLimits
from serval_api.db.models import ApiKeyRow, NodeTokenRow
from serval_api.grpc.calls import AuthenticatedServicer, grpc_call
from serval_api.service import admin


class AdminApi(AuthenticatedServicer, admin_pb2_grpc.AdminApiServicer):
    @grpc_call
    async def CreateApiKey(
        self, request: admin_pb2.CreateApiKeyRequest, context: Context, caller: Caller
    ) -> admin_pb2.CreateApiKeyResponse:
        record, plaintext = await admin.create_api_key(
            self._services,
            caller,
            request.owner,
            request.scopes,
            request.engine_id or None,
            _overrides(request.limits) if request.HasField("limits") else None,
        )
        return admin_pb2.CreateApiKeyResponse(api_key=_api_key(record), key=plaintext)

    @grpc_call
    async def ListApiKeys(
        self, request: admin_pb2.ListApiKeysRequest, context: Context, caller: Caller
    ) -> admin_pb2.ListApiKeysResponse:
        owner = request.owner if request.HasField("owner") else None
        records = await admin.list_api_keys(self._services, caller, owner)
        return admin_pb2.ListApiKeysResponse(api_keys=[_api_key(r) for r in records])

    @grpc_call
    async def RevokeApiKey(
        self, request: admin_pb2.RevokeApiKeyRequest, context: Context, caller: Caller
    ) -> empty_pb2.Empty:
        await admin.revoke_api_key(self._services, caller, request.id)
        return empty_pb2.Empty()

    @grpc_call
    async def SetApiKeyLimits(
        self, request: admin_pb2.SetApiKeyLimitsRequest, context: Context, caller: Caller
    ) -> admin_pb2.ApiKey:
        record = await admin.set_api_key_limits(
            self._services, caller, request.id, _overrides(request.limits)
        )
        return _api_key(record)

    @grpc_call
    async def CreateNodeToken(
        self, request: admin_pb2.CreateNodeTokenRequest, context: Context, caller: Caller
    ) -> admin_pb2.CreateNodeTokenResponse:
        record, plaintext = await admin.create_node_token(self._services, caller, request.name or "default")
        return admin_pb2.CreateNodeTokenResponse(node_token=_node_token(record), token=plaintext)

    @grpc_call
    async def ListNodeTokens(
        self, request: empty_pb2.Empty, context: Context, caller: Caller
    ) -> admin_pb2.ListNodeTokensResponse:
        records = await admin.list_node_tokens(self._services, caller)
        return admin_pb2.ListNodeTokensResponse(node_tokens=[_node_token(r) for r in records])

    @grpc_call
    async def RevokeNodeToken(
        self, request: admin_pb2.RevokeNodeTokenRequest, context: Context, caller: Caller
    ) -> empty_pb2.Empty:
        await admin.revoke_node_token(self._services, caller, request.id)
        return empty_pb2.Empty()

    @grpc_call
    async def ListNodes(
        self, request: empty_pb2.Empty, context: Context, caller: Caller
    ) -> admin_pb2.ListNodesResponse:
        records = await admin.list_nodes(self._services, caller)
        return admin_pb2.ListNodesResponse(nodes=[_node(r) for r in records])

    @grpc_call
    async def DrainNode(
        self, request: admin_pb2.DrainNodeRequest, context: Context, caller: Caller
    ) -> admin_pb2.Node:
        return _node(await admin.drain_node(self._services, caller, request.node_id, request.reason))

    @grpc_call
    async def UndrainNode(
        self, request: admin_pb2.NodeRequest, context: Context, caller: Caller
    ) -> admin_pb2.Node:
        return _node(await admin.undrain_node(self._services, caller, request.node_id))

    @grpc_call
    async def LoadEngine(
        self, request: admin_pb2.NodeEngineRequest, context: Context, caller: Caller
    ) -> admin_pb2.Node:
        revision = request.revision if request.HasField("revision") else None
        view = await admin.load_engine(self._services, caller, request.node_id, request.engine_id, revision)
        return _node(view)

    @grpc_call
    async def UnloadEngine(
        self, request: admin_pb2.NodeEngineRequest, context: Context, caller: Caller
    ) -> admin_pb2.Node:
        return _node(await admin.unload_engine(self._services, caller, request.node_id, request.engine_id))


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _api_key(row: ApiKeyRow) -> admin_pb2.ApiKey:
    message = admin_pb2.ApiKey(
        id=row.id,
        owner=row.owner,
        scopes=row.scopes,
        prefix=row.prefix,
        created_at=_timestamp(row.created_at),
    )
    if row.revoked_at is not None:
        message.revoked_at.CopyFrom(_timestamp(row.revoked_at))
    if row.engine_id is not None:
        message.engine_id = row.engine_id
    stored = KeyLimits.of(row.limits).stored()
    if stored:
        message.limits.CopyFrom(admin_pb2.ApiKeyLimits(**stored))
    return message


def _overrides(message: admin_pb2.ApiKeyLimits) -> KeyLimits:
    return KeyLimits(**{name: getattr(message, name) for name in KEY_LIMIT_FIELDS if message.HasField(name)})


def _node_token(row: NodeTokenRow) -> admin_pb2.NodeToken:
    message = admin_pb2.NodeToken(id=row.id, name=row.name, created_at=_timestamp(row.created_at))
    if row.revoked_at is not None:
        message.revoked_at.CopyFrom(_timestamp(row.revoked_at))
    return message


def _node(view: admin.NodeView) -> admin_pb2.Node:
    return admin_pb2.Node(
        id=view.id,
        status=view.status,
        device=view.device,
        free_slots=view.free_slots,
        last_seen=_timestamp(view.last_seen),
        software_version=view.software_version,
        api_instance_id=view.api_instance_id,
        slots=view.slots,
        in_flight=view.in_flight,
        memory_total_bytes=view.memory_total_bytes,
        memory_free_bytes=view.memory_free_bytes,
        drained=view.drained,
        drain_reason=view.drain_reason or "",
        models=[
            admin_pb2.NodeModel(
                engine_id=m.engine_id,
                revision=m.revision,
                state=m.state,
                message=m.message,
                size_bytes=m.size_bytes,
                weights=m.weights,
                trained_through=m.trained_through,
            )
            for m in view.models
        ],
        loaded_models=view.loaded_models,
        memory_held_bytes=view.memory_held_bytes,
        token_id=view.token_id,
    )
