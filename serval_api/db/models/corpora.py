"""What a build reads: uploaded data files (their contents in 1 MiB chunks), Serval's corpora and
parallel corpora, and the older engine-scoped corpora."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from serval_api.db.models.base import Base, utcnow


class DataFileRow(Base):
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


class DataFileChunkRow(Base):
    """One piece (at most 1 MiB, a size every database stores in a row) of a data file's contents,
    in `seq` order from 0. A file written since they exist has at least one, empty for an empty
    file, so no chunk at all means the contents are still in the model store."""

    __tablename__ = "data_file_chunks"

    file_id: Mapped[str] = mapped_column(ForeignKey("data_files.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class CorpusRow(Base):
    """`files` holds `[{fileId, textId}]` in order; textId is resolved when the corpus is written."""

    __tablename__ = "corpora"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    language: Mapped[str] = mapped_column(String(64))
    revision: Mapped[int] = mapped_column(Integer, default=1)
    files: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class ParallelCorpusRow(Base):
    __tablename__ = "parallel_corpora"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    engine_id: Mapped[str] = mapped_column(ForeignKey("engines.id", ondelete="CASCADE"), index=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200), default=None)
    source_corpus_ids: Mapped[list[Any]] = mapped_column(JSON)
    target_corpus_ids: Mapped[list[Any]] = mapped_column(JSON)
    date_created: Mapped[datetime] = mapped_column(default=utcnow)


class EngineCorpusRow(Base):
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
