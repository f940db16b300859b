from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class AlignedWordPair(_message.Message):
    __slots__ = ("source_index", "target_index", "score")
    SOURCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TARGET_INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    source_index: int
    target_index: int
    score: float
    def __init__(self, source_index: _Optional[int] = ..., target_index: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...
