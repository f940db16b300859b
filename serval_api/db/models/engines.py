"""Engines and what their builds produce: the builds themselves, the segments an engine learned
live, and the pretranslations and word alignments a build streams back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from serval_api.db.models.base import Base, BuildState, JsonModel, JsonModelList, utcnow
from serval_api.db.models.build_record import CorpusAnalysis, ExecutionData, Phase
from serval_common.model_revision import ModelRevision


class EngineRow(Base):
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
    model_learns: Mapped[bool] = mapped_column(default=False, server_default=false())
    """Whether the current revision learns trained pairs (`Manifest.learns_segments`: an
    smt-transfer model, or an nmt revision that reads fuzzy matches), recorded with its weights:
    every node holding it then learns each pair the engine is trained on."""
    pretranslated_revision: Mapped[int | None] = mapped_column(Integer, default=None)
    """The revision whose build made the engine's pretranslations: the current one, except after
    micro-builds, which make none and leave the last full build's (`drafts_revision`)."""
    next_model_revision: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    """The revision number the engine's next build publishes: taken and incremented at each build
    start, so a revision a faulted or canceled build was given is never given again."""
    confidence: Mapped[float] = mapped_column(Float, default=0.0)
    corpus_size: Mapped[int] = mapped_column(Integer, default=0)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)

    @property
    def drafts_revision(self) -> int:
        """The model revision the engine's pretranslations (and word alignments) belong to."""
        return self.pretranslated_revision or self.model_revision

    @property
    def current_revision(self) -> ModelRevision:
        """The revision that serves the engine now, with its weights where known."""
        return ModelRevision(self.id, self.model_revision, self.model_weights or "")


_RUNNING = text("state IN ('Pending', 'Active')")


class BuildRow(Base):
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
    execution_data: Mapped[ExecutionData | None] = mapped_column(JsonModel(ExecutionData), default=None)
    phases: Mapped[list[Phase] | None] = mapped_column(JsonModelList(Phase), default=None)
    job_ref: Mapped[str | None] = mapped_column(String(200), default=None)
    """Who runs the job: `local:{api instance}` or `clearml:{task id}`; restart recovery reads it."""
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    deployment_version: Mapped[str | None] = mapped_column(String(64), default=None)
    """The API service's version when the build was created (Serval's `deploymentVersion`)."""
    target_quote_convention: Mapped[str | None] = mapped_column(String(64), default=None)
    """The quotation-mark convention the build job detected in the target text; None: none found."""
    analysis: Mapped[list[CorpusAnalysis] | None] = mapped_column(JsonModelList(CorpusAnalysis), default=None)
    """One entry per parallel corpus, as the build job reported it."""
    train_segments_through: Mapped[int | None] = mapped_column(Integer, default=None)
    """The highest `TrainSegmentRow.id` the build's training data included (None: none): a node
    loading the build's revision replays the engine's train segments above it."""

    @property
    def build_state(self) -> BuildState:
        return BuildState(self.state)


class TrainSegmentRow(Base):
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


class PretranslationRow(Base):
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


class WordAlignmentRow(Base):
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
