import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApiKey(_message.Message):
    __slots__ = ("id", "owner", "scopes", "prefix", "created_at", "revoked_at", "engine_id", "limits")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    prefix: str
    created_at: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    engine_id: str
    limits: ApiKeyLimits
    def __init__(self, id: _Optional[str] = ..., owner: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., prefix: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., engine_id: _Optional[str] = ..., limits: _Optional[_Union[ApiKeyLimits, _Mapping]] = ...) -> None: ...

class ApiKeyLimits(_message.Message):
    __slots__ = ("translate_per_minute", "build_starts_per_hour", "concurrent_long_polls", "max_chars_per_request")
    TRANSLATE_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    BUILD_STARTS_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_LONG_POLLS_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    translate_per_minute: int
    build_starts_per_hour: int
    concurrent_long_polls: int
    max_chars_per_request: int
    def __init__(self, translate_per_minute: _Optional[int] = ..., build_starts_per_hour: _Optional[int] = ..., concurrent_long_polls: _Optional[int] = ..., max_chars_per_request: _Optional[int] = ...) -> None: ...

class SetApiKeyLimitsRequest(_message.Message):
    __slots__ = ("id", "limits")
    ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    id: str
    limits: ApiKeyLimits
    def __init__(self, id: _Optional[str] = ..., limits: _Optional[_Union[ApiKeyLimits, _Mapping]] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("owner", "scopes", "engine_id", "limits")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    owner: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    engine_id: str
    limits: ApiKeyLimits
    def __init__(self, owner: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., engine_id: _Optional[str] = ..., limits: _Optional[_Union[ApiKeyLimits, _Mapping]] = ...) -> None: ...

class CreateApiKeyResponse(_message.Message):
    __slots__ = ("api_key", "key")
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    api_key: ApiKey
    key: str
    def __init__(self, api_key: _Optional[_Union[ApiKey, _Mapping]] = ..., key: _Optional[str] = ...) -> None: ...

class ListApiKeysRequest(_message.Message):
    __slots__ = ("owner",)
    OWNER_FIELD_NUMBER: _ClassVar[int]
    owner: str
    def __init__(self, owner: _Optional[str] = ...) -> None: ...

class ListApiKeysResponse(_message.Message):
    __slots__ = ("api_keys",)
    API_KEYS_FIELD_NUMBER: _ClassVar[int]
    api_keys: _containers.RepeatedCompositeFieldContainer[ApiKey]
    def __init__(self, api_keys: _Optional[_Iterable[_Union[ApiKey, _Mapping]]] = ...) -> None: ...

class RevokeApiKeyRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class NodeToken(_message.Message):
    __slots__ = ("id", "name", "created_at", "revoked_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    created_at: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateNodeTokenRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateNodeTokenResponse(_message.Message):
    __slots__ = ("node_token", "token")
    NODE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    node_token: NodeToken
    token: str
    def __init__(self, node_token: _Optional[_Union[NodeToken, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class ListNodeTokensResponse(_message.Message):
    __slots__ = ("node_tokens",)
    NODE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    node_tokens: _containers.RepeatedCompositeFieldContainer[NodeToken]
    def __init__(self, node_tokens: _Optional[_Iterable[_Union[NodeToken, _Mapping]]] = ...) -> None: ...

class RevokeNodeTokenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "status", "device", "free_slots", "last_seen", "software_version", "api_instance_id", "slots", "in_flight", "memory_total_bytes", "memory_free_bytes", "drained", "drain_reason", "models", "token_id", "loaded_models", "memory_held_bytes")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    API_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DRAINED_FIELD_NUMBER: _ClassVar[int]
    DRAIN_REASON_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOADED_MODELS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_HELD_BYTES_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: str
    device: str
    free_slots: int
    last_seen: _timestamp_pb2.Timestamp
    software_version: str
    api_instance_id: str
    slots: int
    in_flight: int
    memory_total_bytes: int
    memory_free_bytes: int
    drained: bool
    drain_reason: str
    models: _containers.RepeatedCompositeFieldContainer[NodeModel]
    token_id: str
    loaded_models: int
    memory_held_bytes: int
    def __init__(self, id: _Optional[str] = ..., status: _Optional[str] = ..., device: _Optional[str] = ..., free_slots: _Optional[int] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., software_version: _Optional[str] = ..., api_instance_id: _Optional[str] = ..., slots: _Optional[int] = ..., in_flight: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., drained: _Optional[bool] = ..., drain_reason: _Optional[str] = ..., models: _Optional[_Iterable[_Union[NodeModel, _Mapping]]] = ..., token_id: _Optional[str] = ..., loaded_models: _Optional[int] = ..., memory_held_bytes: _Optional[int] = ...) -> None: ...

class NodeModel(_message.Message):
    __slots__ = ("engine_id", "revision", "state", "message", "size_bytes", "weights", "trained_through")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    TRAINED_THROUGH_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    revision: int
    state: str
    message: str
    size_bytes: int
    weights: str
    trained_through: int
    def __init__(self, engine_id: _Optional[str] = ..., revision: _Optional[int] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., size_bytes: _Optional[int] = ..., weights: _Optional[str] = ..., trained_through: _Optional[int] = ...) -> None: ...

class NodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node_id", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class NodeEngineRequest(_message.Message):
    __slots__ = ("node_id", "engine_id", "revision")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    engine_id: str
    revision: int
    def __init__(self, node_id: _Optional[str] = ..., engine_id: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...
