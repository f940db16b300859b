"""The API service's tables, one module per domain. Portable types only, so the same models run
on SQLite and PostgreSQL. Import them from here: this package is their one public face, and
importing it registers every table on `Base.metadata` (which the migrations compare against)."""

from serval_api.db.models.base import Base, BuildState, EngineType, UtcDateTime, utcnow
from serval_api.db.models.corpora import Corpus, DataFile, DataFileChunk, EngineCorpus, ParallelCorpus
from serval_api.db.models.credentials import ApiKey, NodeToken
from serval_api.db.models.engines import Build, Engine, Pretranslation, TrainSegment, WordAlignment
from serval_api.db.models.limits import LongPollCount, RateWindow
from serval_api.db.models.nodes import Node, NodeSessionRow
from serval_api.db.models.webhooks import DeliveryState, Webhook, WebhookDelivery

__all__ = [
    "ApiKey",
    "Base",
    "Build",
    "BuildState",
    "Corpus",
    "DataFile",
    "DataFileChunk",
    "DeliveryState",
    "Engine",
    "EngineCorpus",
    "EngineType",
    "LongPollCount",
    "Node",
    "NodeSessionRow",
    "NodeToken",
    "ParallelCorpus",
    "Pretranslation",
    "RateWindow",
    "TrainSegment",
    "UtcDateTime",
    "Webhook",
    "WebhookDelivery",
    "WordAlignment",
    "utcnow",
]
