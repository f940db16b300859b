import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProtocolVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_VERSION_UNSPECIFIED: _ClassVar[ProtocolVersion]
    PROTOCOL_VERSION_1: _ClassVar[ProtocolVersion]
    PROTOCOL_VERSION_2: _ClassVar[ProtocolVersion]

class EngineFamily(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_FAMILY_UNSPECIFIED: _ClassVar[EngineFamily]
    ENGINE_FAMILY_NMT: _ClassVar[EngineFamily]
    ENGINE_FAMILY_SMT_TRANSFER: _ClassVar[EngineFamily]
    ENGINE_FAMILY_STATISTICAL: _ClassVar[EngineFamily]

class ModelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_STATE_UNSPECIFIED: _ClassVar[ModelState]
    MODEL_STATE_LOADING: _ClassVar[ModelState]
    MODEL_STATE_READY: _ClassVar[ModelState]
    MODEL_STATE_FAILED: _ClassVar[ModelState]
    MODEL_STATE_UNLOADED: _ClassVar[ModelState]

class WorkErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORK_ERROR_CODE_UNSPECIFIED: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_INVALID_ARGUMENT: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_MODEL_UNAVAILABLE: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_DEADLINE_EXCEEDED: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_OVERLOADED: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_CANCELED: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_INTERNAL: _ClassVar[WorkErrorCode]
    WORK_ERROR_CODE_UNIMPLEMENTED: _ClassVar[WorkErrorCode]

class RejectionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REJECTION_REASON_UNSPECIFIED: _ClassVar[RejectionReason]
    REJECTION_REASON_BAD_TOKEN: _ClassVar[RejectionReason]
    REJECTION_REASON_INCOMPATIBLE_PROTOCOL: _ClassVar[RejectionReason]
    REJECTION_REASON_BAD_HELLO: _ClassVar[RejectionReason]

class WorkClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORK_CLASS_INTERACTIVE: _ClassVar[WorkClass]
    WORK_CLASS_BULK: _ClassVar[WorkClass]

class ResultDetail(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_DETAIL_FULL: _ClassVar[ResultDetail]
    RESULT_DETAIL_TEXT: _ClassVar[ResultDetail]
PROTOCOL_VERSION_UNSPECIFIED: ProtocolVersion
PROTOCOL_VERSION_1: ProtocolVersion
PROTOCOL_VERSION_2: ProtocolVersion
ENGINE_FAMILY_UNSPECIFIED: EngineFamily
ENGINE_FAMILY_NMT: EngineFamily
ENGINE_FAMILY_SMT_TRANSFER: EngineFamily
ENGINE_FAMILY_STATISTICAL: EngineFamily
MODEL_STATE_UNSPECIFIED: ModelState
MODEL_STATE_LOADING: ModelState
MODEL_STATE_READY: ModelState
MODEL_STATE_FAILED: ModelState
MODEL_STATE_UNLOADED: ModelState
WORK_ERROR_CODE_UNSPECIFIED: WorkErrorCode
WORK_ERROR_CODE_INVALID_ARGUMENT: WorkErrorCode
WORK_ERROR_CODE_MODEL_UNAVAILABLE: WorkErrorCode
WORK_ERROR_CODE_DEADLINE_EXCEEDED: WorkErrorCode
WORK_ERROR_CODE_OVERLOADED: WorkErrorCode
WORK_ERROR_CODE_CANCELED: WorkErrorCode
WORK_ERROR_CODE_INTERNAL: WorkErrorCode
WORK_ERROR_CODE_UNIMPLEMENTED: WorkErrorCode
REJECTION_REASON_UNSPECIFIED: RejectionReason
REJECTION_REASON_BAD_TOKEN: RejectionReason
REJECTION_REASON_INCOMPATIBLE_PROTOCOL: RejectionReason
REJECTION_REASON_BAD_HELLO: RejectionReason
WORK_CLASS_INTERACTIVE: WorkClass
WORK_CLASS_BULK: WorkClass
RESULT_DETAIL_FULL: ResultDetail
RESULT_DETAIL_TEXT: ResultDetail

class NodeMessage(_message.Message):
    __slots__ = ("hello", "heartbeat", "result", "model_status", "goodbye", "results")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    MODEL_STATUS_FIELD_NUMBER: _ClassVar[int]
    GOODBYE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    heartbeat: Heartbeat
    result: WorkResult
    model_status: ModelStatus
    goodbye: Goodbye
    results: WorkResults
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., result: _Optional[_Union[WorkResult, _Mapping]] = ..., model_status: _Optional[_Union[ModelStatus, _Mapping]] = ..., goodbye: _Optional[_Union[Goodbye, _Mapping]] = ..., results: _Optional[_Union[WorkResults, _Mapping]] = ...) -> None: ...

class WorkResults(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[WorkResult]
    def __init__(self, results: _Optional[_Iterable[_Union[WorkResult, _Mapping]]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "node_id", "device", "free_slots", "models", "software_version", "slots", "families", "batches")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    node_id: str
    device: DeviceInfo
    free_slots: int
    models: _containers.RepeatedCompositeFieldContainer[ModelStatus]
    software_version: str
    slots: int
    families: _containers.RepeatedScalarFieldContainer[EngineFamily]
    batches: bool
    def __init__(self, protocol_version: _Optional[int] = ..., node_id: _Optional[str] = ..., device: _Optional[_Union[DeviceInfo, _Mapping]] = ..., free_slots: _Optional[int] = ..., models: _Optional[_Iterable[_Union[ModelStatus, _Mapping]]] = ..., software_version: _Optional[str] = ..., slots: _Optional[int] = ..., families: _Optional[_Iterable[_Union[EngineFamily, str]]] = ..., batches: _Optional[bool] = ...) -> None: ...

class DeviceInfo(_message.Message):
    __slots__ = ("kind", "index", "name", "compute_type", "memory_total_bytes", "memory_free_bytes")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    index: int
    name: str
    compute_type: str
    memory_total_bytes: int
    memory_free_bytes: int
    def __init__(self, kind: _Optional[str] = ..., index: _Optional[int] = ..., name: _Optional[str] = ..., compute_type: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("sent_at", "free_slots", "memory_free_bytes", "draining", "slots", "session_in_flight")
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SESSION_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    sent_at: _timestamp_pb2.Timestamp
    free_slots: int
    memory_free_bytes: int
    draining: bool
    slots: int
    session_in_flight: int
    def __init__(self, sent_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., free_slots: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., draining: _Optional[bool] = ..., slots: _Optional[int] = ..., session_in_flight: _Optional[int] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("engine_id", "revision", "location", "weights")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    revision: int
    location: str
    weights: str
    def __init__(self, engine_id: _Optional[str] = ..., revision: _Optional[int] = ..., location: _Optional[str] = ..., weights: _Optional[str] = ...) -> None: ...

class ModelStatus(_message.Message):
    __slots__ = ("model", "state", "message", "size_bytes", "trained_through")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRAINED_THROUGH_FIELD_NUMBER: _ClassVar[int]
    model: ModelRef
    state: ModelState
    message: str
    size_bytes: int
    trained_through: int
    def __init__(self, model: _Optional[_Union[ModelRef, _Mapping]] = ..., state: _Optional[_Union[ModelState, str]] = ..., message: _Optional[str] = ..., size_bytes: _Optional[int] = ..., trained_through: _Optional[int] = ...) -> None: ...

class WorkResult(_message.Message):
    __slots__ = ("request_id", "translate", "word_graph", "train_segment", "alignment", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSLATE_FIELD_NUMBER: _ClassVar[int]
    WORD_GRAPH_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    translate: TranslateOutput
    word_graph: WordGraph
    train_segment: TrainSegmentOutput
    alignment: WordAlignmentResult
    error: WorkError
    def __init__(self, request_id: _Optional[str] = ..., translate: _Optional[_Union[TranslateOutput, _Mapping]] = ..., word_graph: _Optional[_Union[WordGraph, _Mapping]] = ..., train_segment: _Optional[_Union[TrainSegmentOutput, _Mapping]] = ..., alignment: _Optional[_Union[WordAlignmentResult, _Mapping]] = ..., error: _Optional[_Union[WorkError, _Mapping]] = ...) -> None: ...

class TranslateOutput(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TranslationResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TranslationResult, _Mapping]]] = ...) -> None: ...

class TranslationResult(_message.Message):
    __slots__ = ("translation", "source_tokens", "target_tokens", "confidences", "sources", "alignment", "phrases")
    TRANSLATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    PHRASES_FIELD_NUMBER: _ClassVar[int]
    translation: str
    source_tokens: _containers.RepeatedScalarFieldContainer[str]
    target_tokens: _containers.RepeatedScalarFieldContainer[str]
    confidences: _containers.RepeatedScalarFieldContainer[float]
    sources: _containers.RepeatedScalarFieldContainer[int]
    alignment: _containers.RepeatedCompositeFieldContainer[AlignedWordPair]
    phrases: _containers.RepeatedCompositeFieldContainer[Phrase]
    def __init__(self, translation: _Optional[str] = ..., source_tokens: _Optional[_Iterable[str]] = ..., target_tokens: _Optional[_Iterable[str]] = ..., confidences: _Optional[_Iterable[float]] = ..., sources: _Optional[_Iterable[int]] = ..., alignment: _Optional[_Iterable[_Union[AlignedWordPair, _Mapping]]] = ..., phrases: _Optional[_Iterable[_Union[Phrase, _Mapping]]] = ...) -> None: ...

class AlignedWordPair(_message.Message):
    __slots__ = ("source_index", "target_index", "score")
    SOURCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TARGET_INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    source_index: int
    target_index: int
    score: float
    def __init__(self, source_index: _Optional[int] = ..., target_index: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class Phrase(_message.Message):
    __slots__ = ("source_segment_start", "source_segment_end", "target_segment_cut")
    SOURCE_SEGMENT_START_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEGMENT_END_FIELD_NUMBER: _ClassVar[int]
    TARGET_SEGMENT_CUT_FIELD_NUMBER: _ClassVar[int]
    source_segment_start: int
    source_segment_end: int
    target_segment_cut: int
    def __init__(self, source_segment_start: _Optional[int] = ..., source_segment_end: _Optional[int] = ..., target_segment_cut: _Optional[int] = ...) -> None: ...

class WordGraph(_message.Message):
    __slots__ = ("source_tokens", "initial_state_score", "final_states", "arcs")
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_STATE_SCORE_FIELD_NUMBER: _ClassVar[int]
    FINAL_STATES_FIELD_NUMBER: _ClassVar[int]
    ARCS_FIELD_NUMBER: _ClassVar[int]
    source_tokens: _containers.RepeatedScalarFieldContainer[str]
    initial_state_score: float
    final_states: _containers.RepeatedScalarFieldContainer[int]
    arcs: _containers.RepeatedCompositeFieldContainer[WordGraphArc]
    def __init__(self, source_tokens: _Optional[_Iterable[str]] = ..., initial_state_score: _Optional[float] = ..., final_states: _Optional[_Iterable[int]] = ..., arcs: _Optional[_Iterable[_Union[WordGraphArc, _Mapping]]] = ...) -> None: ...

class WordGraphArc(_message.Message):
    __slots__ = ("prev_state", "next_state", "score", "target_tokens", "confidences", "source_segment_start", "source_segment_end", "alignment", "sources")
    PREV_STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_STATE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEGMENT_START_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEGMENT_END_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    prev_state: int
    next_state: int
    score: float
    target_tokens: _containers.RepeatedScalarFieldContainer[str]
    confidences: _containers.RepeatedScalarFieldContainer[float]
    source_segment_start: int
    source_segment_end: int
    alignment: _containers.RepeatedCompositeFieldContainer[AlignedWordPair]
    sources: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, prev_state: _Optional[int] = ..., next_state: _Optional[int] = ..., score: _Optional[float] = ..., target_tokens: _Optional[_Iterable[str]] = ..., confidences: _Optional[_Iterable[float]] = ..., source_segment_start: _Optional[int] = ..., source_segment_end: _Optional[int] = ..., alignment: _Optional[_Iterable[_Union[AlignedWordPair, _Mapping]]] = ..., sources: _Optional[_Iterable[int]] = ...) -> None: ...

class WordAlignmentResult(_message.Message):
    __slots__ = ("source_tokens", "target_tokens", "alignment")
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    source_tokens: _containers.RepeatedScalarFieldContainer[str]
    target_tokens: _containers.RepeatedScalarFieldContainer[str]
    alignment: _containers.RepeatedCompositeFieldContainer[AlignedWordPair]
    def __init__(self, source_tokens: _Optional[_Iterable[str]] = ..., target_tokens: _Optional[_Iterable[str]] = ..., alignment: _Optional[_Iterable[_Union[AlignedWordPair, _Mapping]]] = ...) -> None: ...

class WorkError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: WorkErrorCode
    message: str
    def __init__(self, code: _Optional[_Union[WorkErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Goodbye(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ApiMessage(_message.Message):
    __slots__ = ("welcome", "rejection", "work", "load_model", "unload_model", "drain", "cancel", "undrain", "catch_up", "work_items")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    REJECTION_FIELD_NUMBER: _ClassVar[int]
    WORK_FIELD_NUMBER: _ClassVar[int]
    LOAD_MODEL_FIELD_NUMBER: _ClassVar[int]
    UNLOAD_MODEL_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    UNDRAIN_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    WORK_ITEMS_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    rejection: Rejection
    work: WorkItem
    load_model: LoadModel
    unload_model: UnloadModel
    drain: Drain
    cancel: Cancel
    undrain: Undrain
    catch_up: CatchUp
    work_items: WorkItems
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., rejection: _Optional[_Union[Rejection, _Mapping]] = ..., work: _Optional[_Union[WorkItem, _Mapping]] = ..., load_model: _Optional[_Union[LoadModel, _Mapping]] = ..., unload_model: _Optional[_Union[UnloadModel, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., undrain: _Optional[_Union[Undrain, _Mapping]] = ..., catch_up: _Optional[_Union[CatchUp, _Mapping]] = ..., work_items: _Optional[_Union[WorkItems, _Mapping]] = ...) -> None: ...

class WorkItems(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[WorkItem]
    def __init__(self, items: _Optional[_Iterable[_Union[WorkItem, _Mapping]]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("protocol_version", "session_id", "api_instance_id", "heartbeat_interval_ms", "batches")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    API_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    session_id: str
    api_instance_id: str
    heartbeat_interval_ms: int
    batches: bool
    def __init__(self, protocol_version: _Optional[int] = ..., session_id: _Optional[str] = ..., api_instance_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., batches: _Optional[bool] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("reason", "message", "supported_protocol_versions")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_PROTOCOL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    reason: RejectionReason
    message: str
    supported_protocol_versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, reason: _Optional[_Union[RejectionReason, str]] = ..., message: _Optional[str] = ..., supported_protocol_versions: _Optional[_Iterable[int]] = ...) -> None: ...

class WorkItem(_message.Message):
    __slots__ = ("request_id", "deadline", "model", "owner", "key_id", "work_class", "translate", "word_graph", "train_segment", "align")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    WORK_CLASS_FIELD_NUMBER: _ClassVar[int]
    TRANSLATE_FIELD_NUMBER: _ClassVar[int]
    WORD_GRAPH_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    ALIGN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    deadline: _timestamp_pb2.Timestamp
    model: ModelRef
    owner: str
    key_id: str
    work_class: WorkClass
    translate: TranslateOp
    word_graph: WordGraphOp
    train_segment: TrainSegmentOp
    align: AlignOp
    def __init__(self, request_id: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., owner: _Optional[str] = ..., key_id: _Optional[str] = ..., work_class: _Optional[_Union[WorkClass, str]] = ..., translate: _Optional[_Union[TranslateOp, _Mapping]] = ..., word_graph: _Optional[_Union[WordGraphOp, _Mapping]] = ..., train_segment: _Optional[_Union[TrainSegmentOp, _Mapping]] = ..., align: _Optional[_Union[AlignOp, _Mapping]] = ...) -> None: ...

class TranslateOp(_message.Message):
    __slots__ = ("segment", "n", "source_language", "target_language", "target_prefix", "detail")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    segment: str
    n: int
    source_language: str
    target_language: str
    target_prefix: str
    detail: ResultDetail
    def __init__(self, segment: _Optional[str] = ..., n: _Optional[int] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., target_prefix: _Optional[str] = ..., detail: _Optional[_Union[ResultDetail, str]] = ...) -> None: ...

class WordGraphOp(_message.Message):
    __slots__ = ("segment", "source_language", "target_language")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    segment: str
    source_language: str
    target_language: str
    def __init__(self, segment: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ...) -> None: ...

class TrainSegmentOp(_message.Message):
    __slots__ = ("source_segment", "target_segment", "sentence_start", "seq", "previous_seq")
    SOURCE_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_START_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_SEQ_FIELD_NUMBER: _ClassVar[int]
    source_segment: str
    target_segment: str
    sentence_start: bool
    seq: int
    previous_seq: int
    def __init__(self, source_segment: _Optional[str] = ..., target_segment: _Optional[str] = ..., sentence_start: _Optional[bool] = ..., seq: _Optional[int] = ..., previous_seq: _Optional[int] = ...) -> None: ...

class TrainSegmentOutput(_message.Message):
    __slots__ = ("seq", "trained_through")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TRAINED_THROUGH_FIELD_NUMBER: _ClassVar[int]
    seq: int
    trained_through: int
    def __init__(self, seq: _Optional[int] = ..., trained_through: _Optional[int] = ...) -> None: ...

class AlignOp(_message.Message):
    __slots__ = ("source_segment", "target_segment")
    SOURCE_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    source_segment: str
    target_segment: str
    def __init__(self, source_segment: _Optional[str] = ..., target_segment: _Optional[str] = ...) -> None: ...

class GetTrainSegmentsRequest(_message.Message):
    __slots__ = ("model", "after_seq")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    model: ModelRef
    after_seq: int
    def __init__(self, model: _Optional[_Union[ModelRef, _Mapping]] = ..., after_seq: _Optional[int] = ...) -> None: ...

class GetTrainSegmentsResponse(_message.Message):
    __slots__ = ("segments", "through")
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    THROUGH_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[TrainSegmentOp]
    through: int
    def __init__(self, segments: _Optional[_Iterable[_Union[TrainSegmentOp, _Mapping]]] = ..., through: _Optional[int] = ...) -> None: ...

class TrainSegmentsChunk(_message.Message):
    __slots__ = ("segments", "through")
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    THROUGH_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[TrainSegmentOp]
    through: int
    def __init__(self, segments: _Optional[_Iterable[_Union[TrainSegmentOp, _Mapping]]] = ..., through: _Optional[int] = ...) -> None: ...

class LoadModel(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: ModelRef
    def __init__(self, model: _Optional[_Union[ModelRef, _Mapping]] = ...) -> None: ...

class UnloadModel(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: ModelRef
    def __init__(self, model: _Optional[_Union[ModelRef, _Mapping]] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Undrain(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class CatchUp(_message.Message):
    __slots__ = ("model", "through")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    THROUGH_FIELD_NUMBER: _ClassVar[int]
    model: ModelRef
    through: int
    def __init__(self, model: _Optional[_Union[ModelRef, _Mapping]] = ..., through: _Optional[int] = ...) -> None: ...
