import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from serval.word_alignment.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PhaseStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_STAGE_TRAIN: _ClassVar[PhaseStage]
    PHASE_STAGE_INFERENCE: _ClassVar[PhaseStage]
PHASE_STAGE_TRAIN: PhaseStage
PHASE_STAGE_INFERENCE: PhaseStage

class UpdateBuildStatusRequest(_message.Message):
    __slots__ = ("build_id", "step", "progress", "message", "queue_depth", "phases", "started", "completed")
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    step: int
    progress: float
    message: str
    queue_depth: int
    phases: _containers.RepeatedCompositeFieldContainer[Phase]
    started: _timestamp_pb2.Timestamp
    completed: _timestamp_pb2.Timestamp
    def __init__(self, build_id: _Optional[str] = ..., step: _Optional[int] = ..., progress: _Optional[float] = ..., message: _Optional[str] = ..., queue_depth: _Optional[int] = ..., phases: _Optional[_Iterable[_Union[Phase, _Mapping]]] = ..., started: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., completed: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class BuildStartedRequest(_message.Message):
    __slots__ = ("build_id",)
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    def __init__(self, build_id: _Optional[str] = ...) -> None: ...

class BuildCompletedRequest(_message.Message):
    __slots__ = ("build_id", "corpus_size", "confidence")
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    CORPUS_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    corpus_size: int
    confidence: float
    def __init__(self, build_id: _Optional[str] = ..., corpus_size: _Optional[int] = ..., confidence: _Optional[float] = ...) -> None: ...

class BuildCanceledRequest(_message.Message):
    __slots__ = ("build_id",)
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    def __init__(self, build_id: _Optional[str] = ...) -> None: ...

class BuildFaultedRequest(_message.Message):
    __slots__ = ("build_id", "message")
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    message: str
    def __init__(self, build_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class BuildRestartingRequest(_message.Message):
    __slots__ = ("build_id",)
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    def __init__(self, build_id: _Optional[str] = ...) -> None: ...

class IncrementEngineCorpusSizeRequest(_message.Message):
    __slots__ = ("engine_id", "count")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    count: int
    def __init__(self, engine_id: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class InsertWordAlignmentsRequest(_message.Message):
    __slots__ = ("engine_id", "corpus_id", "text_id", "source_refs", "target_refs", "source_tokens", "target_tokens", "alignment")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    CORPUS_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REFS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REFS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    corpus_id: str
    text_id: str
    source_refs: _containers.RepeatedScalarFieldContainer[str]
    target_refs: _containers.RepeatedScalarFieldContainer[str]
    source_tokens: _containers.RepeatedScalarFieldContainer[str]
    target_tokens: _containers.RepeatedScalarFieldContainer[str]
    alignment: _containers.RepeatedCompositeFieldContainer[_common_pb2.AlignedWordPair]
    def __init__(self, engine_id: _Optional[str] = ..., corpus_id: _Optional[str] = ..., text_id: _Optional[str] = ..., source_refs: _Optional[_Iterable[str]] = ..., target_refs: _Optional[_Iterable[str]] = ..., source_tokens: _Optional[_Iterable[str]] = ..., target_tokens: _Optional[_Iterable[str]] = ..., alignment: _Optional[_Iterable[_Union[_common_pb2.AlignedWordPair, _Mapping]]] = ...) -> None: ...

class UpdateBuildExecutionDataRequest(_message.Message):
    __slots__ = ("engine_id", "build_id", "execution_data")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_DATA_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    build_id: str
    execution_data: ExecutionData
    def __init__(self, engine_id: _Optional[str] = ..., build_id: _Optional[str] = ..., execution_data: _Optional[_Union[ExecutionData, _Mapping]] = ...) -> None: ...

class Phase(_message.Message):
    __slots__ = ("stage", "step", "step_count", "started")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    stage: PhaseStage
    step: int
    step_count: int
    started: _timestamp_pb2.Timestamp
    def __init__(self, stage: _Optional[_Union[PhaseStage, str]] = ..., step: _Optional[int] = ..., step_count: _Optional[int] = ..., started: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ExecutionData(_message.Message):
    __slots__ = ("train_count", "word_align_count", "warnings", "engine_source_language_tag", "engine_target_language_tag")
    TRAIN_COUNT_FIELD_NUMBER: _ClassVar[int]
    WORD_ALIGN_COUNT_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_SOURCE_LANGUAGE_TAG_FIELD_NUMBER: _ClassVar[int]
    ENGINE_TARGET_LANGUAGE_TAG_FIELD_NUMBER: _ClassVar[int]
    train_count: int
    word_align_count: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    engine_source_language_tag: str
    engine_target_language_tag: str
    def __init__(self, train_count: _Optional[int] = ..., word_align_count: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ..., engine_source_language_tag: _Optional[str] = ..., engine_target_language_tag: _Optional[str] = ...) -> None: ...
