import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from serval.translation.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TranslationSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSLATION_SOURCE_PRIMARY: _ClassVar[TranslationSource]
    TRANSLATION_SOURCE_SECONDARY: _ClassVar[TranslationSource]
    TRANSLATION_SOURCE_HUMAN: _ClassVar[TranslationSource]

class FileFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_FORMAT_TEXT: _ClassVar[FileFormat]
    FILE_FORMAT_PARATEXT: _ClassVar[FileFormat]
TRANSLATION_SOURCE_PRIMARY: TranslationSource
TRANSLATION_SOURCE_SECONDARY: TranslationSource
TRANSLATION_SOURCE_HUMAN: TranslationSource
FILE_FORMAT_TEXT: FileFormat
FILE_FORMAT_PARATEXT: FileFormat

class CreateRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "engine_name", "source_language", "target_language", "is_model_persisted")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    IS_MODEL_PERSISTED_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    engine_name: str
    source_language: str
    target_language: str
    is_model_persisted: bool
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., engine_name: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., is_model_persisted: _Optional[bool] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ...) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "source_language", "target_language")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    source_language: str
    target_language: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ...) -> None: ...

class TranslateRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "segment", "n")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    segment: str
    n: int
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., segment: _Optional[str] = ..., n: _Optional[int] = ...) -> None: ...

class TranslateResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TranslationResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TranslationResult, _Mapping]]] = ...) -> None: ...

class TranslatePrefixRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "segment", "prefix", "n")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    segment: str
    prefix: str
    n: int
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., segment: _Optional[str] = ..., prefix: _Optional[str] = ..., n: _Optional[int] = ...) -> None: ...

class GetWordGraphRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "segment")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    segment: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., segment: _Optional[str] = ...) -> None: ...

class GetWordGraphResponse(_message.Message):
    __slots__ = ("word_graph",)
    WORD_GRAPH_FIELD_NUMBER: _ClassVar[int]
    word_graph: WordGraph
    def __init__(self, word_graph: _Optional[_Union[WordGraph, _Mapping]] = ...) -> None: ...

class TrainSegmentPairRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "source_segment", "target_segment", "sentence_start")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_START_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    source_segment: str
    target_segment: str
    sentence_start: bool
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., source_segment: _Optional[str] = ..., target_segment: _Optional[str] = ..., sentence_start: _Optional[bool] = ...) -> None: ...

class StartBuildRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "build_id", "options", "corpora")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CORPORA_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    build_id: str
    options: str
    corpora: _containers.RepeatedCompositeFieldContainer[ParallelCorpus]
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., build_id: _Optional[str] = ..., options: _Optional[str] = ..., corpora: _Optional[_Iterable[_Union[ParallelCorpus, _Mapping]]] = ...) -> None: ...

class CancelBuildRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ...) -> None: ...

class CancelBuildResponse(_message.Message):
    __slots__ = ("build_id",)
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    def __init__(self, build_id: _Optional[str] = ...) -> None: ...

class GetModelDownloadUrlRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ...) -> None: ...

class GetModelDownloadUrlResponse(_message.Message):
    __slots__ = ("url", "model_revision", "expires_at")
    URL_FIELD_NUMBER: _ClassVar[int]
    MODEL_REVISION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    url: str
    model_revision: int
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, url: _Optional[str] = ..., model_revision: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetQueueSizeRequest(_message.Message):
    __slots__ = ("engine_type",)
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    def __init__(self, engine_type: _Optional[str] = ...) -> None: ...

class GetQueueSizeResponse(_message.Message):
    __slots__ = ("size",)
    SIZE_FIELD_NUMBER: _ClassVar[int]
    size: int
    def __init__(self, size: _Optional[int] = ...) -> None: ...

class GetLanguageInfoRequest(_message.Message):
    __slots__ = ("engine_type", "language")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    language: str
    def __init__(self, engine_type: _Optional[str] = ..., language: _Optional[str] = ...) -> None: ...

class GetLanguageInfoResponse(_message.Message):
    __slots__ = ("internal_code", "is_native")
    INTERNAL_CODE_FIELD_NUMBER: _ClassVar[int]
    IS_NATIVE_FIELD_NUMBER: _ClassVar[int]
    internal_code: str
    is_native: bool
    def __init__(self, internal_code: _Optional[str] = ..., is_native: _Optional[bool] = ...) -> None: ...

class WatchBuildRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "build_id", "min_revision")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_REVISION_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    build_id: str
    min_revision: int
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., build_id: _Optional[str] = ..., min_revision: _Optional[int] = ...) -> None: ...

class BuildUpdate(_message.Message):
    __slots__ = ("build_id", "revision", "state", "progress", "message", "queue_depth", "step", "engine_model_revision")
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ENGINE_MODEL_REVISION_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    revision: int
    state: str
    progress: float
    message: str
    queue_depth: int
    step: int
    engine_model_revision: int
    def __init__(self, build_id: _Optional[str] = ..., revision: _Optional[int] = ..., state: _Optional[str] = ..., progress: _Optional[float] = ..., message: _Optional[str] = ..., queue_depth: _Optional[int] = ..., step: _Optional[int] = ..., engine_model_revision: _Optional[int] = ...) -> None: ...

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
    sources: _containers.RepeatedCompositeFieldContainer[TranslationSources]
    alignment: _containers.RepeatedCompositeFieldContainer[_common_pb2.AlignedWordPair]
    phrases: _containers.RepeatedCompositeFieldContainer[Phrase]
    def __init__(self, translation: _Optional[str] = ..., source_tokens: _Optional[_Iterable[str]] = ..., target_tokens: _Optional[_Iterable[str]] = ..., confidences: _Optional[_Iterable[float]] = ..., sources: _Optional[_Iterable[_Union[TranslationSources, _Mapping]]] = ..., alignment: _Optional[_Iterable[_Union[_common_pb2.AlignedWordPair, _Mapping]]] = ..., phrases: _Optional[_Iterable[_Union[Phrase, _Mapping]]] = ...) -> None: ...

class TranslationSources(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[TranslationSource]
    def __init__(self, values: _Optional[_Iterable[_Union[TranslationSource, str]]] = ...) -> None: ...

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
    alignment: _containers.RepeatedCompositeFieldContainer[_common_pb2.AlignedWordPair]
    sources: _containers.RepeatedCompositeFieldContainer[TranslationSources]
    def __init__(self, prev_state: _Optional[int] = ..., next_state: _Optional[int] = ..., score: _Optional[float] = ..., target_tokens: _Optional[_Iterable[str]] = ..., confidences: _Optional[_Iterable[float]] = ..., source_segment_start: _Optional[int] = ..., source_segment_end: _Optional[int] = ..., alignment: _Optional[_Iterable[_Union[_common_pb2.AlignedWordPair, _Mapping]]] = ..., sources: _Optional[_Iterable[_Union[TranslationSources, _Mapping]]] = ...) -> None: ...

class ParallelCorpus(_message.Message):
    __slots__ = ("id", "source_corpora", "target_corpora")
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CORPORA_FIELD_NUMBER: _ClassVar[int]
    TARGET_CORPORA_FIELD_NUMBER: _ClassVar[int]
    id: str
    source_corpora: _containers.RepeatedCompositeFieldContainer[MonolingualCorpus]
    target_corpora: _containers.RepeatedCompositeFieldContainer[MonolingualCorpus]
    def __init__(self, id: _Optional[str] = ..., source_corpora: _Optional[_Iterable[_Union[MonolingualCorpus, _Mapping]]] = ..., target_corpora: _Optional[_Iterable[_Union[MonolingualCorpus, _Mapping]]] = ...) -> None: ...

class MonolingualCorpus(_message.Message):
    __slots__ = ("id", "language", "train_on_all", "pretranslate_all", "train_on_chapters", "pretranslate_chapters", "train_on_text_ids", "pretranslate_text_ids", "files")
    class TrainOnChaptersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScriptureChapters
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScriptureChapters, _Mapping]] = ...) -> None: ...
    class PretranslateChaptersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScriptureChapters
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScriptureChapters, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ON_ALL_FIELD_NUMBER: _ClassVar[int]
    PRETRANSLATE_ALL_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ON_CHAPTERS_FIELD_NUMBER: _ClassVar[int]
    PRETRANSLATE_CHAPTERS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ON_TEXT_IDS_FIELD_NUMBER: _ClassVar[int]
    PRETRANSLATE_TEXT_IDS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    id: str
    language: str
    train_on_all: bool
    pretranslate_all: bool
    train_on_chapters: _containers.MessageMap[str, ScriptureChapters]
    pretranslate_chapters: _containers.MessageMap[str, ScriptureChapters]
    train_on_text_ids: _containers.RepeatedScalarFieldContainer[str]
    pretranslate_text_ids: _containers.RepeatedScalarFieldContainer[str]
    files: _containers.RepeatedCompositeFieldContainer[CorpusFile]
    def __init__(self, id: _Optional[str] = ..., language: _Optional[str] = ..., train_on_all: _Optional[bool] = ..., pretranslate_all: _Optional[bool] = ..., train_on_chapters: _Optional[_Mapping[str, ScriptureChapters]] = ..., pretranslate_chapters: _Optional[_Mapping[str, ScriptureChapters]] = ..., train_on_text_ids: _Optional[_Iterable[str]] = ..., pretranslate_text_ids: _Optional[_Iterable[str]] = ..., files: _Optional[_Iterable[_Union[CorpusFile, _Mapping]]] = ...) -> None: ...

class ScriptureChapters(_message.Message):
    __slots__ = ("chapters",)
    CHAPTERS_FIELD_NUMBER: _ClassVar[int]
    chapters: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, chapters: _Optional[_Iterable[int]] = ...) -> None: ...

class CorpusFile(_message.Message):
    __slots__ = ("location", "format", "text_id")
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TEXT_ID_FIELD_NUMBER: _ClassVar[int]
    location: str
    format: FileFormat
    text_id: str
    def __init__(self, location: _Optional[str] = ..., format: _Optional[_Union[FileFormat, str]] = ..., text_id: _Optional[str] = ...) -> None: ...
