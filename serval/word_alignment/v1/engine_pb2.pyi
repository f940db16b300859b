from google.protobuf import empty_pb2 as _empty_pb2
from serval.word_alignment.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_FORMAT_TEXT: _ClassVar[FileFormat]
    FILE_FORMAT_PARATEXT: _ClassVar[FileFormat]
FILE_FORMAT_TEXT: FileFormat
FILE_FORMAT_PARATEXT: FileFormat

class CreateRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "engine_name", "source_language", "target_language")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    engine_name: str
    source_language: str
    target_language: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., engine_name: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ...) -> None: ...

class GetWordAlignmentRequest(_message.Message):
    __slots__ = ("engine_type", "engine_id", "source_segment", "target_segment")
    ENGINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    engine_type: str
    engine_id: str
    source_segment: str
    target_segment: str
    def __init__(self, engine_type: _Optional[str] = ..., engine_id: _Optional[str] = ..., source_segment: _Optional[str] = ..., target_segment: _Optional[str] = ...) -> None: ...

class GetWordAlignmentResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: WordAlignmentResult
    def __init__(self, result: _Optional[_Union[WordAlignmentResult, _Mapping]] = ...) -> None: ...

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

class WordAlignmentResult(_message.Message):
    __slots__ = ("source_tokens", "target_tokens", "alignment")
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    source_tokens: _containers.RepeatedScalarFieldContainer[str]
    target_tokens: _containers.RepeatedScalarFieldContainer[str]
    alignment: _containers.RepeatedCompositeFieldContainer[_common_pb2.AlignedWordPair]
    def __init__(self, source_tokens: _Optional[_Iterable[str]] = ..., target_tokens: _Optional[_Iterable[str]] = ..., alignment: _Optional[_Iterable[_Union[_common_pb2.AlignedWordPair, _Mapping]]] = ...) -> None: ...

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
    __slots__ = ("id", "language", "train_on_all", "word_align_on_all", "train_on_chapters", "word_align_on_chapters", "train_on_text_ids", "word_align_on_text_ids", "files")
    class TrainOnChaptersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScriptureChapters
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScriptureChapters, _Mapping]] = ...) -> None: ...
    class WordAlignOnChaptersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScriptureChapters
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScriptureChapters, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ON_ALL_FIELD_NUMBER: _ClassVar[int]
    WORD_ALIGN_ON_ALL_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ON_CHAPTERS_FIELD_NUMBER: _ClassVar[int]
    WORD_ALIGN_ON_CHAPTERS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ON_TEXT_IDS_FIELD_NUMBER: _ClassVar[int]
    WORD_ALIGN_ON_TEXT_IDS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    id: str
    language: str
    train_on_all: bool
    word_align_on_all: bool
    train_on_chapters: _containers.MessageMap[str, ScriptureChapters]
    word_align_on_chapters: _containers.MessageMap[str, ScriptureChapters]
    train_on_text_ids: _containers.RepeatedScalarFieldContainer[str]
    word_align_on_text_ids: _containers.RepeatedScalarFieldContainer[str]
    files: _containers.RepeatedCompositeFieldContainer[CorpusFile]
    def __init__(self, id: _Optional[str] = ..., language: _Optional[str] = ..., train_on_all: _Optional[bool] = ..., word_align_on_all: _Optional[bool] = ..., train_on_chapters: _Optional[_Mapping[str, ScriptureChapters]] = ..., word_align_on_chapters: _Optional[_Mapping[str, ScriptureChapters]] = ..., train_on_text_ids: _Optional[_Iterable[str]] = ..., word_align_on_text_ids: _Optional[_Iterable[str]] = ..., files: _Optional[_Iterable[_Union[CorpusFile, _Mapping]]] = ...) -> None: ...

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
