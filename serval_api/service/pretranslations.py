"""Pretranslations: the segments a build job translated for the corpora its build named in
`pretranslate`, streamed back over InsertPretranslations and read by clients.

A row carries the id of the parallel corpus it came from (`corpusId` in the build export) and is
tagged with its build and the build's target model revision. Clients see the rows of the build
that made the engine's current `modelRevision`, so a build's rows appear together when it
completes; its completion removes every other build's rows for the engine, and a build that
faults, is canceled or restarts loses its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import tempfile
import zipfile
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import Delete, delete, select
from sqlalchemy import insert as sql_insert
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import Build, BuildState, Corpus, DataFile, Engine, ParallelCorpus, Pretranslation
from serval_api.errors import InvalidArgument, NotBuilt, PermissionDenied, Unauthenticated
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_api.service.files import FileFormat, contents_key, model_store
from serval_api.service.job_auth import authorize_job_for_engine
from serval_api.service.parallel_corpora import owned_parallel_corpus
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

INSERT_BATCH = 500
"""Rows written per transaction while a stream arrives."""


@dataclass(frozen=True)
class PretranslationRow:
    """One InsertPretranslations message, as the service takes it."""

    engine_id: str
    corpus_id: str
    text_id: str
    translation: str
    source_refs: list[str] = field(default_factory=list)
    target_refs: list[str] = field(default_factory=list)
    confidence: float = 0.0


class TextOrigin(StrEnum):
    """Serval's `textOrigin` of the USFM endpoint."""

    PREFER_EXISTING = "PreferExisting"
    PREFER_PRETRANSLATED = "PreferPretranslated"
    ONLY_EXISTING = "OnlyExisting"
    ONLY_PRETRANSLATED = "OnlyPretranslated"


class UsfmTemplate(StrEnum):
    """Serval's `template` of the USFM endpoint."""

    AUTO = "Auto"
    SOURCE = "Source"
    TARGET = "Target"


class MarkerBehavior(StrEnum):
    """Serval's paragraph, embed and style marker behaviors of the USFM endpoint."""

    PRESERVE = "Preserve"
    STRIP = "Strip"


@dataclass(frozen=True)
class UsfmOptions:
    text_origin: TextOrigin = TextOrigin.PREFER_PRETRANSLATED
    template: UsfmTemplate = UsfmTemplate.SOURCE
    paragraph_behavior: MarkerBehavior = MarkerBehavior.PRESERVE
    embed_behavior: MarkerBehavior = MarkerBehavior.PRESERVE
    style_behavior: MarkerBehavior = MarkerBehavior.STRIP


async def insert(services: Services, token: str | None, rows: AsyncIterable[PretranslationRow]) -> int:
    """Store a job's stream of rows, `INSERT_BATCH` per transaction. The job token must belong to
    a build of the first row's engine, and that build must still be Pending or Active. A stream
    replaces the rows the build's earlier streams stored: a job re-sends its whole stream after a
    transient failure, which may have come after some batches, or all of them, were stored."""
    if not token:
        raise Unauthenticated("missing job token: send `authorization: Bearer <job token>`")
    build_id: str | None = None
    engine_id = ""
    batch: list[dict[str, Any]] = []
    count = 0
    max_items = services.settings.api.max_list_items
    async for row in rows:
        if build_id is None:
            engine_id = row.engine_id
            if not limits.can_be_id(engine_id):
                raise PermissionDenied(f"the job token is not valid for engine {limits.shown(engine_id)}")
            build_id = await authorize_job_for_engine(services, engine_id, token)
        batch.append(_validated(row, engine_id, count, max_items))
        count += 1
        if len(batch) >= INSERT_BATCH:
            await _write(services, engine_id, build_id, batch, replace=count == len(batch))
            batch = []
    if build_id is None:
        return 0
    if batch:
        await _write(services, engine_id, build_id, batch, replace=count == len(batch))
    log.info("pretranslations stored", extra={"engine_id": engine_id, "build_id": build_id, "rows": count})
    return count


def _validated(row: PretranslationRow, engine_id: str, index: int, max_items: int) -> dict[str, Any]:
    where = f"pretranslation {index}"
    if row.engine_id != engine_id:
        raise InvalidArgument(
            f"{where}: engine_id {limits.shown(row.engine_id)} differs from the stream's {engine_id!r}"
        )
    for name, value, limit in (
        ("corpus_id", row.corpus_id, limits.CORPUS_ID_CHARS),
        ("text_id", row.text_id, limits.TEXT_ID_CHARS),
    ):
        if not value or len(value) > limit:
            raise InvalidArgument(f"{where}: {name} must hold 1 to {limit} characters")
        limits.no_nul(f"{where}: {name}", value)
    limits.no_nul(f"{where}: translation", row.translation)
    limits.items(f"{where}: source_refs", row.source_refs, max_items)
    limits.items(f"{where}: target_refs", row.target_refs, max_items)
    if not math.isfinite(row.confidence) or not 0.0 <= row.confidence <= 1.0:
        raise InvalidArgument(f"{where}: confidence must be between 0 and 1, not {row.confidence}")
    return {
        "corpus_id": row.corpus_id,
        "text_id": row.text_id,
        "source_refs": list(row.source_refs),
        "target_refs": list(row.target_refs),
        "translation": row.translation,
        "confidence": row.confidence,
    }


async def _write(
    services: Services, engine_id: str, build_id: str, batch: list[dict[str, Any]], *, replace: bool
) -> None:
    """`replace`: the stream's first batch, which first deletes the build's earlier rows."""
    async with services.db.session() as s:
        # Engine before build, the order every writer locks in: a fault or cancel waits for this
        # batch, and the batch never lands after the cleanup that follows them.
        await s.get(Engine, engine_id, with_for_update=True)
        build = await s.get(Build, build_id, with_for_update=True)
        if build is None or not build.build_state.is_running:
            state = build.state if build is not None else "gone"
            raise NotBuilt(f"build {build_id} is {state}; it accepts no more pretranslations")
        if replace:
            await s.execute(delete(Pretranslation).where(Pretranslation.build_id == build_id))
        tag = {"engine_id": engine_id, "build_id": build_id, "model_revision": build.target_model_revision}
        await s.execute(sql_insert(Pretranslation), [{**row, **tag} for row in batch])


async def build_finished(services: Services, build: Build) -> None:
    """A completed build's rows replace every other build's rows of the engine; a faulted or
    canceled build's own rows go."""
    if build.build_state == BuildState.COMPLETED:
        query = delete(Pretranslation).where(
            Pretranslation.engine_id == build.engine_id, Pretranslation.build_id != build.id
        )
        await _delete(services, build, query)
    elif not build.build_state.is_running:
        await discard(services, build)


async def discard(services: Services, build: Build) -> None:
    """Remove the build's own rows (it failed, or restarts and will send them again)."""
    await _delete(services, build, delete(Pretranslation).where(Pretranslation.build_id == build.id))


async def _delete(services: Services, build: Build, query: Delete) -> None:
    async with services.db.session() as s:
        removed = (await s.execute(query)).rowcount  # type: ignore[attr-defined]
    if removed:
        log.info(
            "pretranslations removed",
            extra={"engine_id": build.engine_id, "build_id": build.id, "state": build.state, "rows": removed},
        )


async def list_pretranslations(
    services: Services, caller: Caller, engine_id: str, corpus_id: str, *, text_id: str | None = None
) -> list[Pretranslation]:
    """The rows of the engine's current model for one of its parallel corpora, in source order."""
    caller.require(READ_ENGINES)
    limits.optional_text("textId", text_id, limits.TEXT_ID_CHARS)
    async with services.db.session() as s:
        engine, pc = await _built_parallel_corpus(s, caller, engine_id, corpus_id)
        return await _current_rows(s, engine, pc.id, text_id)


async def usfm(
    services: Services,
    caller: Caller,
    engine_id: str,
    corpus_id: str,
    text_id: str,
    options: UsfmOptions,
) -> str | None:
    """The source project's book `text_id` with its verse texts replaced by the pretranslations;
    None when the project has no such book. Only a Paratext project can serve as template."""
    caller.require(READ_ENGINES)
    limits.text("textId", text_id, limits.TEXT_ID_CHARS)
    _check_usfm_options(options)
    async with services.db.session() as s:
        engine, pc = await _built_parallel_corpus(s, caller, engine_id, corpus_id)
        sources = await _paratext_files(s, pc.source_corpus_ids)
        if not sources:
            raise InvalidArgument(
                f"parallel corpus {pc.id}: its source is not a Paratext project; "
                "USFM is served only for Paratext sources"
            )
        if options.template == UsfmTemplate.AUTO and await _paratext_files(s, pc.target_corpus_ids):
            raise InvalidArgument(
                "template Auto would use the target Paratext project, which is not served here; "
                "ask for template Source"
            )
        rows = await _current_rows(s, engine, pc.id, text_id)
    store = model_store(services.settings)
    return await asyncio.to_thread(_updated_book, store, sources, text_id, rows, options)


def _check_usfm_options(options: UsfmOptions) -> None:
    if options.text_origin not in (TextOrigin.ONLY_PRETRANSLATED, TextOrigin.PREFER_PRETRANSLATED):
        raise InvalidArgument(
            f"textOrigin {options.text_origin.value} needs the target project's existing text, which is "
            "not served here; use OnlyPretranslated or PreferPretranslated"
        )
    if options.template == UsfmTemplate.TARGET:
        raise InvalidArgument("template Target is not served here: the USFM is built on the source project")


async def _built_parallel_corpus(
    s: AsyncSession, caller: Caller, engine_id: str, corpus_id: str
) -> tuple[Engine, ParallelCorpus]:
    engine = await owned_engine(s, caller, engine_id)
    pc = await owned_parallel_corpus(s, caller, engine_id, corpus_id)
    if engine.model_revision == 0:
        raise NotBuilt(f"engine {engine_id} has no completed build, so no pretranslations")
    return engine, pc


async def _current_rows(
    s: AsyncSession, engine: Engine, corpus_id: str, text_id: str | None
) -> list[Pretranslation]:
    query = (
        select(Pretranslation)
        .join(Build, Build.id == Pretranslation.build_id)
        .where(
            Pretranslation.engine_id == engine.id,
            Pretranslation.model_revision == engine.model_revision,
            Pretranslation.corpus_id == corpus_id,
            Build.state == BuildState.COMPLETED.value,
        )
        .order_by(Pretranslation.id)
    )
    if text_id is not None:
        query = query.where(Pretranslation.text_id == text_id)
    return list((await s.scalars(query)).all())


async def _paratext_files(s: AsyncSession, corpus_ids: Sequence[str]) -> list[str]:
    """Store keys of the Paratext project files of these corpora, in corpus and file order."""
    keys = []
    for corpus_id in corpus_ids:
        corpus = await s.get(Corpus, corpus_id)
        for entry in corpus.files if corpus is not None else ():
            file = await s.get(DataFile, entry["fileId"])
            if file is not None and file.format == FileFormat.PARATEXT.value:
                keys.append(contents_key(file.id))
    return keys


def _updated_book(
    store: ModelStore, sources: list[str], book: str, rows: list[Pretranslation], options: UsfmOptions
) -> str | None:
    """Blocking: the first source project that has the book, updated through sil-machine."""
    with tempfile.TemporaryDirectory(prefix="serval-usfm-") as tmp:
        for i, key in enumerate(sources):
            path = Path(tmp) / str(i)
            store.download_file(key, path)
            try:
                text = _update_project_book(path, book, rows, options)
            except Exception as e:
                raise InvalidArgument(f"the source Paratext project cannot be read: {e}") from None
            if text is not None:
                return text
    return None


def _update_project_book(
    project: Path, book: str, rows: list[Pretranslation], options: UsfmOptions
) -> str | None:
    from machine.corpora import (
        ScriptureRef,
        UpdateUsfmMarkerBehavior,
        UpdateUsfmRow,
        UpdateUsfmTextBehavior,
        ZipParatextProjectSettingsParser,
        ZipParatextProjectTextUpdater,
    )

    def behavior(value: MarkerBehavior) -> UpdateUsfmMarkerBehavior:
        strip = value == MarkerBehavior.STRIP
        return UpdateUsfmMarkerBehavior.STRIP if strip else UpdateUsfmMarkerBehavior.PRESERVE

    with zipfile.ZipFile(project) as archive:
        versification = ZipParatextProjectSettingsParser(archive).parse().versification
        updates = []
        for row in rows:
            refs = []
            for ref in row.source_refs:
                with contextlib.suppress(ValueError, KeyError, IndexError):
                    refs.append(ScriptureRef.parse(ref, versification))
            if refs:
                updates.append(UpdateUsfmRow(refs, row.translation))
        # The source's own words are never "existing" target text: only pretranslations fill verses.
        text = ZipParatextProjectTextUpdater(archive).update_usfm(
            book,
            updates,
            text_behavior=UpdateUsfmTextBehavior.STRIP_EXISTING,
            paragraph_behavior=behavior(options.paragraph_behavior),
            embed_behavior=behavior(options.embed_behavior),
            style_behavior=behavior(options.style_behavior),
        )
    return None if text is None else str(text)
