from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HealthCheckStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNHEALTHY: _ClassVar[HealthCheckStatus]
    DEGRADED: _ClassVar[HealthCheckStatus]
    HEALTHY: _ClassVar[HealthCheckStatus]
UNHEALTHY: HealthCheckStatus
DEGRADED: HealthCheckStatus
HEALTHY: HealthCheckStatus

class HealthCheckResponse(_message.Message):
    __slots__ = ("status", "data", "error")
    class DataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: HealthCheckStatus
    data: _containers.ScalarMap[str, str]
    error: str
    def __init__(self, status: _Optional[_Union[HealthCheckStatus, str]] = ..., data: _Optional[_Mapping[str, str]] = ..., error: _Optional[str] = ...) -> None: ...
