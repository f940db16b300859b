"""The API service's tables, one module per domain. Portable types only, so the same models run
on SQLite and PostgreSQL. Import them from here: this package is their one public face, and
importing it registers every table on `Base.metadata` (which the migrations compare against).

The classes are rows, named so (`EngineRow`, `BuildRow`), and declare no `relationship()`: a
session then orders the inserts of two classes by module and class name, not by their foreign
keys, so code that adds a row and rows that refer to it in one transaction flushes the first
before adding the others."""

from serval_api.db.models.base import (
    TRANSLATION_TYPES,
    WORD_ALIGNMENT_TYPES,
    Base,
    BuildState,
    EngineType,
    UtcDateTime,
    utcnow,
)
from serval_api.db.models.corpora import (
    CorpusRow,
    DataFileChunkRow,
    DataFileRow,
    EngineCorpusRow,
    ParallelCorpusRow,
)
from serval_api.db.models.credentials import ApiKeyRow, NodeTokenRow
from serval_api.db.models.engines import (
    BuildRow,
    EngineRow,
    PretranslationRow,
    TrainSegmentRow,
    WordAlignmentRow,
)
from serval_api.db.models.limits import LongPollCountRow, RateWindowRow
from serval_api.db.models.nodes import NodeRow, NodeSessionRow
from serval_api.db.models.webhooks import DeliveryState, WebhookDeliveryRow, WebhookRow

__all__ = [
    "TRANSLATION_TYPES",
    "WORD_ALIGNMENT_TYPES",
    "ApiKeyRow",
    "Base",
    "BuildRow",
    "BuildState",
    "CorpusRow",
    "DataFileChunkRow",
    "DataFileRow",
    "DeliveryState",
    "EngineCorpusRow",
    "EngineRow",
    "EngineType",
    "LongPollCountRow",
    "NodeRow",
    "NodeSessionRow",
    "NodeTokenRow",
    "ParallelCorpusRow",
    "PretranslationRow",
    "RateWindowRow",
    "TrainSegmentRow",
    "UtcDateTime",
    "WebhookDeliveryRow",
    "WebhookRow",
    "WordAlignmentRow",
    "utcnow",
]
