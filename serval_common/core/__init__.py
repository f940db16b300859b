"""The transport-neutral model of what engines answer: translation results, word graphs and word
alignments, immutable and checked on construction (as SIL's machine.py keeps `TranslationResult`
and `WordGraph`), and who asked for them (`Sender`: owner, API key, interactive or bulk).

The service layer, the dispatcher and the node's engine families speak only this model; each
transport converts at its own edge: Serval REST (`serval_api/rest/`), Serval gRPC
(`serval_api/grpc/`), the node protocol (`serval_common/node_codec.py`, used by both ends),
SIL Converters' dialect and LibreTranslate's.
"""

from serval_common.core.detail import Detail
from serval_common.core.results import (
    AlignedWordPair,
    InvalidResult,
    Phrase,
    TranslationResult,
    TranslationSource,
    WordAlignmentResult,
)
from serval_common.core.sender import UNKNOWN_SENDER, Sender, WorkClass, work_class
from serval_common.core.word_graph import WordGraph, WordGraphArc

__all__ = [
    "UNKNOWN_SENDER",
    "AlignedWordPair",
    "Detail",
    "InvalidResult",
    "Phrase",
    "Sender",
    "TranslationResult",
    "TranslationSource",
    "WordAlignmentResult",
    "WordGraph",
    "WordGraphArc",
    "WorkClass",
    "work_class",
]
