"""The API service's tables. Portable types only, so the same models run on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from serval_common.families import EngineFamily, Kind, family
from serval_common.model_revision import ModelRevision


class EngineType(StrEnum):
    """Serval's engine types. `nmt`, `echo` and `smt-transfer` are translation engines
    (`/translation/engines`); `statistical` and `echo-word-alignment` are word-alignment engines
    (`/word-alignment/engines`)."""

    NMT = "nmt"
    ECHO = "echo"
    SMT_TRANSFER = "smt-transfer"
    STATISTICAL = "statistical"
    ECHO_WORD_ALIGNMENT = "echo-word-alignment"

    @property
    def family(self) -> EngineFamily:
        """What this type answers, how it is built and what serves it (`serval_common.families`)."""
        return family(self.value)

    @property
    def is_word_alignment(self) -> bool:
        return self.family.kind is Kind.WORD_ALIGNMENT

    @property
    def is_echo(self) -> bool:
        """Echo types need no model and no node: their builds run inside the API service."""
        return self.family.served_here


class BuildState(StrEnum):
    PENDING = "Pending"
    ACTIVE = "Active"
    COMPLETED = "Completed"
    FAULTED = "Faulted"
    CANCELED = "Canceled"

    @property
    def is_running(self) -> bool:
        return self in (BuildState.PENDING, BuildState.ACTIVE)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the offset on its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    """Serval's `clientId`: whose entities the key reaches."""
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    """What the key is for; None for a key made without one (before Serval 1.20's `name`)."""
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    """From then on the key authenticates nothing; None: it does not expire."""
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    engine_id: Mapped[str | None] = mapped_column(String(64), default=None)
    """The engine the key is bound to (one of its owner's): the SIL Converters and LibreTranslate
    dialects, whose clients name no engine, translate with it. None: with the public base model.
    No foreign key: a key whose engine was deleted says so instead of quietly becoming unbound."""
    limits: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """An administrator's overrides of the per-key limits (`LimitSettings` field → value); None or
    a missing field: the setting."""


class NodeToken(Base):
    __tablename__ = "node_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Engine(Base):
    __tablename__ = "engines"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    type: Mapped[str] = mapped_column(String(32))
    source_language: Mapped[str] = mapped_column(String(64))
    target_language: Mapped[str] = mapped_column(String(64))
    source_code: Mapped[str] = mapped_column(String(64))
    target_code: Mapped[str] = mapped_column(String(64))
    is_model_persisted: Mapped[bool | None] = mapped_column(default=None)
    is_building: Mapped[bool] = mapped_column(default=False)
    model_revision: Mapped[int] = mapped_column(Integer, default=0)
    model_weights: Mapped[str | None] = mapped_column(String(200), default=None)
    """The weights identity of the current revision (`serval_common.model_revision`), recorded when
    its build completes: the dispatcher sends work to a node holding those weights under any
    revision. None: not known (the echo types, or the store was unreachable then)."""
    next_model_revision: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    """The revision number the engine's next build publishes: taken and incremented at each build
    start, so a revision a faulted or canceled build was given is never given again."""
    confidence: Mapped[float] = mapped_column(Float, default=0.0)
    corpus_size: Mapped[int] = mapped_column(Integer, default=0)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)

    @property
    def current_revision(self) -> ModelRevision:
        """The revision that serves the engine now, with its weights where known."""
        return ModelRevision(self.id, self.model_revision, self.model_weights or "")


_RUNNING = text("state IN ('Pending', 'Active')")


class Build(Base):
    __tablename__ = "builds"
    __table_args__ = (
        Index(
            "one_running_build_per_engine",
            "engine_id",
            unique=True,
            sqlite_where=_RUNNING,
            postgresql_where=_RUNNING,
        ),
        Index("builds_by_owner_created", "owner", "date_created"),
        Index("builds_by_owner_finished", "owner", "date_finished"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    state: Mapped[str] = mapped_column(String(16), default=BuildState.PENDING.value)
    step: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[float | None] = mapped_column(Float, default=None)
    message: Mapped[str | None] = mapped_column(String(2000), default=None)
    queue_depth: Mapped[int | None] = mapped_column(Integer, default=None)
    train_on: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    pretranslate: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    options: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    target_model_revision: Mapped[int] = mapped_column(Integer)
    job_token_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)
    date_started: Mapped[datetime | None] = mapped_column(default=None)
    date_finished: Mapped[datetime | None] = mapped_column(default=None)
    execution_data: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    phases: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    job_ref: Mapped[str | None] = mapped_column(String(200), default=None)
    """Who runs the job: `local:{api instance}` or `clearml:{task id}`; restart recovery reads it."""
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    deployment_version: Mapped[str | None] = mapped_column(String(64), default=None)
    """The API service's version when the build was created (Serval's `deploymentVersion`)."""
    target_quote_convention: Mapped[str | None] = mapped_column(String(64), default=None)
    """The quotation-mark convention the build job detected in the target text; None: none found."""
    analysis: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    """One entry per parallel corpus: `{parallelCorpusRef, sourceQuoteConvention,
    targetQuoteConvention, canDenormalizeQuotes}` as the build job reported it."""
    train_segments_through: Mapped[int | None] = mapped_column(Integer, default=None)
    """The highest `TrainSegment.id` the build's training data included (None: none): a node
    loading the build's revision replays the engine's train segments above it."""

    @property
    def build_state(self) -> BuildState:
        return BuildState(self.state)


class Node(Base):
    """An inference node as last seen by this API replica; live routing state stays in memory."""

    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(200), default="")
    session_id: Mapped[str | None] = mapped_column(String(64), default=None)
    api_instance_id: Mapped[str | None] = mapped_column(String(200), default=None)
    software_version: Mapped[str | None] = mapped_column(String(64), default=None)
    free_slots: Mapped[int] = mapped_column(Integer, default=0)
    first_seen: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow)
    token_id: Mapped[str | None] = mapped_column(String(64), default=None)
    drain_reason: Mapped[str | None] = mapped_column(String(500), default=None)
    """Set while an admin has the node drained: it is told to drain again whenever it connects."""


class NodeSessionRow(Base):
    """One live node session with one API replica: a node dialing every replica has one per replica,
    and is connected while it has any."""

    __tablename__ = "node_sessions"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(200), index=True)
    api_instance_id: Mapped[str] = mapped_column(String(200), index=True)
    opened_at: Mapped[datetime] = mapped_column(default=utcnow)


class DataFile(Base):
    """A client's uploaded file; its contents are its `DataFileChunk` rows (one uploaded before
    those existed has none: its contents are in the model store at `files/{id}/contents`)."""

    __tablename__ = "data_files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(500), default=None)
    format: Mapped[str] = mapped_column(String(16))
    revision: Mapped[int] = mapped_column(Integer, default=1)
    size: Mapped[int] = mapped_column(Integer, default=0)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class DataFileChunk(Base):
    """One piece (at most 1 MiB, a size every database stores in a row) of a data file's contents,
    in `seq` order from 0. A file written since they exist has at least one, empty for an empty
    file, so no chunk at all means the contents are still in the model store."""

    __tablename__ = "data_file_chunks"

    file_id: Mapped[str] = mapped_column(ForeignKey("data_files.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Corpus(Base):
    """`files` holds `[{fileId, textId}]` in order; textId is resolved when the corpus is written."""

    __tablename__ = "corpora"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    language: Mapped[str] = mapped_column(String(64))
    revision: Mapped[int] = mapped_column(Integer, default=1)
    files: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class ParallelCorpus(Base):
    __tablename__ = "parallel_corpora"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    source_corpus_ids: Mapped[list[Any]] = mapped_column(JSON)
    target_corpus_ids: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class TrainSegment(Base):
    """A human translation sent with train-segment: it answers an exact (normalized) match of its
    source at once (or, for a family that learns segments, is learned by every node serving the
    engine) and joins the engine's next build as training data.

    `id` increases with every pair stored: a pair trained again with another target is stored as
    a new row (the old one removed), so `id` orders the replay and a node applies each id once."""

    __tablename__ = "train_segments"
    __table_args__ = (UniqueConstraint("engine_id", "source_key", name="one_train_segment_per_source"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    source_key: Mapped[str] = mapped_column(String(64))
    source_segment: Mapped[str] = mapped_column(Text)
    target_segment: Mapped[str] = mapped_column(Text)
    sentence_start: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Pretranslation(Base):
    """One translated segment a build job streamed back (InsertPretranslations). Rows belong to the
    build's model revision; clients see those of the engine's current `modelRevision`."""

    __tablename__ = "pretranslations"
    __table_args__ = (Index("pretranslations_lookup", "engine_id", "model_revision", "corpus_id", "text_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"))
    build_id: Mapped[str] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    model_revision: Mapped[int] = mapped_column(Integer)
    corpus_id: Mapped[str] = mapped_column(String(64))
    text_id: Mapped[str] = mapped_column(String(200))
    source_refs: Mapped[list[Any]] = mapped_column(JSON)
    target_refs: Mapped[list[Any]] = mapped_column(JSON)
    translation: Mapped[str] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(Float, default=0.0)


class EngineCorpus(Base):
    """Serval's older engine-scoped corpus (`TranslationCorpus`): one source and one target
    language, each side a list of `{fileId, textId}` naming the owner's data files directly."""

    __tablename__ = "engine_corpora"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    source_language: Mapped[str] = mapped_column(String(64))
    target_language: Mapped[str] = mapped_column(String(64))
    source_files: Mapped[list[Any]] = mapped_column(JSON)
    target_files: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class Webhook(Base):
    """A client's webhook: its events on the owner's engines are POSTed to `payload_url`, signed
    with `secret` (never sent back to clients)."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    payload_url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(500))
    events: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class DeliveryState(StrEnum):
    PENDING = "Pending"
    DELIVERED = "Delivered"
    FAILED = "Failed"


class WebhookDelivery(Base):
    """The durable outbox: one row per event and hook, written in the same transaction as the
    change it reports; a replica claims due rows, POSTs `body` and records the outcome."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("webhook_deliveries_due", "state", "next_attempt_at"),
        Index("webhook_deliveries_settled", "state", "last_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    event: Mapped[str] = mapped_column(String(64))
    build_id: Mapped[str | None] = mapped_column(String(64), default=None)
    """The build the event is about: one build's events go to a hook one after another, in order.
    None (rows enqueued before the column): each row on its own."""
    body: Mapped[str] = mapped_column(Text)
    """The exact JSON text sent (and signed)."""
    state: Mapped[str] = mapped_column(String(16), default=DeliveryState.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_by: Mapped[str | None] = mapped_column(String(200), default=None)
    claimed_until: Mapped[datetime | None] = mapped_column(default=None)
    last_status: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str | None] = mapped_column(String(500), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    last_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    """When the latest attempt ended: records are pruned this long after they were delivered or
    given up (`webhooks.delivered_retention_s`, `failed_retention_s`)."""


class RateWindow(Base):
    """How much of a per-key limit was taken in one fixed window (`service/quotas.py`): every
    replica adds to the same row atomically, so the limit holds across replicas and restarts.
    Windows that ended are pruned."""

    __tablename__ = "rate_windows"

    subject: Mapped[str] = mapped_column(String(250), primary_key=True)
    """Whose: `key:{id}`, `jwt:{owner}` or `owner:{owner}`."""
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    """The window's start, in seconds since the epoch (a multiple of its length)."""
    used: Mapped[int] = mapped_column(BigInteger, default=0)
    """Taken by every replica so far (a replica takes a few at a time; it may pass the limit)."""


class LongPollCount(Base):
    """How many long polls of one subject one replica holds waiting: each replica writes its own
    counts about once a second and reads the others', so a key's concurrent long polls are counted
    over all replicas. A replica renews `expires_at` while it runs; a dead one's rows lapse."""

    __tablename__ = "long_poll_counts"

    subject: Mapped[str] = mapped_column(String(250), primary_key=True)
    replica: Mapped[str] = mapped_column(String(200), primary_key=True)
    held: Mapped[int] = mapped_column(Integer, default=0)
    expires_at: Mapped[datetime] = mapped_column()


class WordAlignment(Base):
    """One aligned sentence pair a word-alignment build streamed back (InsertWordAlignments). Rows
    belong to the build's model revision; clients see those of the engine's current `modelRevision`.
    `alignment` holds `[sourceIndex, targetIndex, score]` triples."""

    __tablename__ = "word_alignments"
    __table_args__ = (Index("word_alignments_lookup", "engine_id", "model_revision", "corpus_id", "text_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"))
    build_id: Mapped[str] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    model_revision: Mapped[int] = mapped_column(Integer)
    corpus_id: Mapped[str] = mapped_column(String(64))
    text_id: Mapped[str] = mapped_column(String(200))
    source_refs: Mapped[list[Any]] = mapped_column(JSON)
    target_refs: Mapped[list[Any]] = mapped_column(JSON)
    source_tokens: Mapped[list[Any]] = mapped_column(JSON)
    target_tokens: Mapped[list[Any]] = mapped_column(JSON)
    alignment: Mapped[list[Any]] = mapped_column(JSON)
