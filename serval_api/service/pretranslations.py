"""Pretranslations: the segments a build job translated for the corpora its build named in
`pretranslate`, streamed back over InsertPretranslations and read by clients.

A row carries the id of the corpus it came from (`corpusId` in the build export: a parallel
corpus, or an engine corpus of Serval's older API) and is
tagged with its build and the build's target model revision. Clients see the rows of the build
that made the engine's current `modelRevision`, so a build's rows appear together when it
completes; its completion removes every other build's rows for the engine, and a build that
faults, is canceled or restarts loses its own. A word-alignment build's rows
(`word_alignment.py`) arrive, and follow its revisions, the same way: `insert_rows`,
`build_finished` and `discard` serve both tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import tempfile
import zipfile
from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import Delete, delete, select
from sqlalchemy import insert as sql_insert
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import Build, BuildState, Corpus, DataFile, Engine, Pretranslation, WordAlignment
from serval_api.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotBuilt,
    NotFound,
    PermissionDenied,
    ServalError,
    Unauthenticated,
    Unavailable,
    concealed,
)
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.engine_corpora import owned_engine_corpus
from serval_api.service.engines import owned_engine
from serval_api.service.files import FileFormat, contents_key, model_store
from serval_api.service.job_auth import authorize_job_for_engine
from serval_api.service.parallel_corpora import owned_parallel_corpus
from serval_common.store import ModelStore, ObjectMissing, StoreError

log = logging.getLogger(__name__)

INSERT_BATCH = 500
"""Rows written per transaction while a stream arrives."""

ResultTable = type[Pretranslation] | type[WordAlignment]
"""The tables of rows a build job streams back for its build's model revision."""

RESULT_TABLES: tuple[ResultTable, ...] = (Pretranslation, WordAlignment)


class StreamedRow(Protocol):
    @property
    def engine_id(self) -> str: ...


R = TypeVar("R", bound=StreamedRow)


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
    """Serval's `text-origin` of the USFM endpoint."""

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
    PRESERVE_POSITION = "PreservePosition"
    STRIP = "Strip"


class QuotationMarkBehavior(StrEnum):
    """Serval's `quotation-mark-behavior` (PretranslationNormalizationBehavior)."""

    NORMALIZED = "Normalized"
    DENORMALIZED = "Denormalized"


@dataclass(frozen=True)
class UsfmOptions:
    """Serval's defaults."""

    text_origin: TextOrigin = TextOrigin.PREFER_EXISTING
    template: UsfmTemplate = UsfmTemplate.AUTO
    paragraph_behavior: MarkerBehavior = MarkerBehavior.PRESERVE
    embed_behavior: MarkerBehavior = MarkerBehavior.PRESERVE
    style_behavior: MarkerBehavior = MarkerBehavior.STRIP
    quotation_marks: QuotationMarkBehavior = QuotationMarkBehavior.DENORMALIZED


@dataclass(frozen=True)
class _Projects:
    """The Paratext projects (store keys, in corpus and file order) of a corpus's two sides."""

    corpus_id: str
    source: list[str]
    target: list[str]


async def insert(services: Services, token: str | None, rows: AsyncIterable[PretranslationRow]) -> int:
    return await insert_rows(services, token, rows, Pretranslation, _validated)


async def insert_rows(
    services: Services,
    token: str | None,
    rows: AsyncIterable[R],
    table: ResultTable,
    validate: Callable[[R, str, int, int], dict[str, Any]],
) -> int:
    """Store a job's stream of rows into `table`, `INSERT_BATCH` per transaction, each row made a
    column dict by `validate(row, engine_id, index, max_items)`. The job token must belong to
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
        batch.append(validate(row, engine_id, count, max_items))
        count += 1
        if len(batch) >= INSERT_BATCH:
            await _write(services, table, engine_id, build_id, batch, replace=count == len(batch))
            batch = []
    if build_id is None:
        return 0
    if batch:
        await _write(services, table, engine_id, build_id, batch, replace=count == len(batch))
    extra = {"engine_id": engine_id, "build_id": build_id, "rows": count, "table": table.__tablename__}
    log.info("build rows stored", extra=extra)
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
    services: Services,
    table: ResultTable,
    engine_id: str,
    build_id: str,
    batch: list[dict[str, Any]],
    *,
    replace: bool,
) -> None:
    """`replace`: the stream's first batch, which first deletes the build's earlier rows."""
    async with services.db.session() as s:
        # Engine before build, the order every writer locks in: a fault or cancel waits for this
        # batch, and the batch never lands after the cleanup that follows them.
        await s.get(Engine, engine_id, with_for_update=True)
        build = await s.get(Build, build_id, with_for_update=True)
        if build is None or not build.build_state.is_running:
            state = build.state if build is not None else "gone"
            what = table.__tablename__.replace("_", " ")
            raise NotBuilt(f"build {build_id} is {state}; it accepts no more {what}")
        if replace:
            await s.execute(delete(table).where(table.build_id == build_id))
        tag = {"engine_id": engine_id, "build_id": build_id, "model_revision": build.target_model_revision}
        await s.execute(sql_insert(table), [{**row, **tag} for row in batch])


async def store_echo(s: AsyncSession, build: Build, source_rows: list[dict[str, Any]]) -> None:
    """An echo build's pretranslations, in the transaction that completes it: each source segment
    the build exported is its own translation, as Serval's echo engine answers; they replace the
    engine's earlier rows."""
    await s.flush()
    await s.execute(
        delete(Pretranslation).where(
            Pretranslation.engine_id == build.engine_id, Pretranslation.build_id != build.id
        )
    )
    if source_rows:
        tag = {
            "engine_id": build.engine_id,
            "build_id": build.id,
            "model_revision": build.target_model_revision,
        }
        rows = [
            {
                **tag,
                "corpus_id": row["corpusId"],
                "text_id": row["textId"],
                "source_refs": row["sourceRefs"],
                "target_refs": row["targetRefs"],
                "translation": row["translation"],
                "confidence": 1.0,
            }
            for row in source_rows
        ]
        await s.execute(sql_insert(Pretranslation), rows)


async def build_finished(services: Services, build: Build) -> None:
    """A completed build's rows (pretranslations, word alignments) replace every other build's
    rows of the engine; a faulted or canceled build's own rows go."""
    if build.build_state == BuildState.COMPLETED:
        for table in RESULT_TABLES:
            query = delete(table).where(table.engine_id == build.engine_id, table.build_id != build.id)
            await _delete(services, build, table, query)
    elif not build.build_state.is_running:
        await discard(services, build)


async def discard(services: Services, build: Build) -> None:
    """Remove the build's own rows (it failed, or restarts and will send them again)."""
    for table in RESULT_TABLES:
        await _delete(services, build, table, delete(table).where(table.build_id == build.id))


async def _delete(services: Services, build: Build, table: ResultTable, query: Delete) -> None:
    async with services.db.session() as s:
        removed = (await s.execute(query)).rowcount  # type: ignore[attr-defined]
    if removed:
        log.info(
            "build rows removed",
            extra={
                "engine_id": build.engine_id,
                "build_id": build.id,
                "state": build.state,
                "rows": removed,
                "table": table.__tablename__,
            },
        )


async def list_pretranslations(
    services: Services,
    caller: Caller,
    engine_id: str,
    corpus_id: str,
    *,
    text_id: str | None = None,
    engine_corpus: bool = False,
) -> list[Pretranslation]:
    """The rows of the engine's current model for one of its corpora, in source order.
    `engine_corpus`: `corpus_id` names an engine corpus, or else (as before engine corpora) a
    parallel corpus; otherwise a parallel corpus."""
    caller.require(READ_ENGINES)
    limits.optional_text("textId", text_id, limits.TEXT_ID_CHARS)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id)
        projects = await _corpus_projects(s, caller, engine_id, corpus_id, engine_corpus=engine_corpus)
        _require_built(engine)
        return await current_rows(s, Pretranslation, engine, projects.corpus_id, text_id)


async def usfm(
    services: Services,
    caller: Caller,
    engine_id: str,
    corpus_id: str,
    text_id: str,
    options: UsfmOptions,
    *,
    engine_corpus: bool = False,
) -> str | None:
    """Book `text_id` as USFM: a Paratext project's book (the template) with its verse texts
    taken from the pretranslations and/or the target's existing text as `options` say; None when
    no project of the corpus has the book."""
    caller.require(READ_ENGINES)
    limits.text("textId", text_id, limits.TEXT_ID_CHARS)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id)
        projects = await _corpus_projects(s, caller, engine_id, corpus_id, engine_corpus=engine_corpus)
        _require_built(engine)
        if not projects.source and not projects.target:
            raise InvalidArgument(
                f"corpus {projects.corpus_id}: neither side is a Paratext project; USFM is served only "
                "for Paratext projects"
            )
        if options.template == UsfmTemplate.TARGET and not projects.target:
            raise InvalidArgument(
                f"corpus {projects.corpus_id}: template Target needs a target Paratext project; "
                "its target has none (ask for template Source or Auto)"
            )
        if options.template == UsfmTemplate.SOURCE and not projects.source:
            raise InvalidArgument(
                f"corpus {projects.corpus_id}: template Source needs a source Paratext project; "
                "its source has none (ask for template Target or Auto)"
            )
        rows = await current_rows(s, Pretranslation, engine, projects.corpus_id, text_id)
        convention = (
            await _target_convention(s, engine, projects.corpus_id)
            if options.quotation_marks == QuotationMarkBehavior.DENORMALIZED
            else None
        )
    store = model_store(services.settings)
    try:
        book = await asyncio.to_thread(_book_usfm, store, projects, text_id, rows, options, convention)
    except _ProjectFailure as failure:
        ids = {"engine_id": engine_id, "corpus_id": projects.corpus_id, "text_id": text_id}
        retry_after_s = 5 if failure.error_type is Unavailable else None
        raise concealed(
            failure.error_type, failure.public, failure.cause, log, ids, retry_after_s=retry_after_s
        ) from None
    log.debug(
        "pretranslated usfm",
        extra={
            "engine_id": engine_id,
            "corpus_id": projects.corpus_id,
            "text_id": text_id,
            "template": options.template.value,
            "text_origin": options.text_origin.value,
            "convention": convention or "none",
            "found": book is not None,
        },
    )
    return book


def _require_built(engine: Engine) -> None:
    if engine.model_revision == 0:
        raise NotBuilt(f"engine {engine.id} has no completed build, so no pretranslations")


async def _corpus_projects(
    s: AsyncSession, caller: Caller, engine_id: str, corpus_id: str, *, engine_corpus: bool
) -> _Projects:
    if engine_corpus:
        with contextlib.suppress(NotFound):
            found = await owned_engine_corpus(s, caller, engine_id, corpus_id)
            return _Projects(
                found.id,
                await _paratext_keys(s, caller, [f["fileId"] for f in found.source_files]),
                await _paratext_keys(s, caller, [f["fileId"] for f in found.target_files]),
            )
    try:
        pc = await owned_parallel_corpus(s, caller, engine_id, corpus_id)
    except NotFound:
        if engine_corpus:
            raise NotFound(f"corpus {limits.shown(corpus_id)} not found") from None
        raise
    return _Projects(
        pc.id,
        await _paratext_keys(s, caller, await _corpus_file_ids(s, pc.source_corpus_ids)),
        await _paratext_keys(s, caller, await _corpus_file_ids(s, pc.target_corpus_ids)),
    )


async def _corpus_file_ids(s: AsyncSession, corpus_ids: Sequence[str]) -> list[str]:
    ids: list[str] = []
    for corpus_id in corpus_ids:
        corpus = await s.get(Corpus, corpus_id)
        ids.extend(entry["fileId"] for entry in (corpus.files if corpus is not None else ()))
    return ids


async def _paratext_keys(s: AsyncSession, caller: Caller, file_ids: Sequence[str]) -> list[str]:
    """Store keys of the caller's Paratext project files among `file_ids`, in order."""
    keys = []
    for file_id in file_ids:
        file = await s.get(DataFile, file_id)
        if file is not None and file.owner == caller.owner and file.format == FileFormat.PARATEXT.value:
            keys.append(contents_key(file.id))
    return keys


Row = TypeVar("Row", Pretranslation, WordAlignment)


async def current_rows(
    s: AsyncSession, table: type[Row], engine: Engine, corpus_id: str, text_id: str | None
) -> list[Row]:
    """The rows (pretranslations or word alignments) a completed build of the engine's current
    model revision streamed for one corpus, in the order the job sent them."""
    query = (
        select(table)
        .join(Build, Build.id == table.build_id)
        .where(
            table.engine_id == engine.id,
            table.model_revision == engine.model_revision,
            table.corpus_id == corpus_id,
            Build.state == BuildState.COMPLETED.value,
        )
        .order_by(table.id)
    )
    if text_id is not None:
        query = query.where(table.text_id == text_id)
    return list((await s.scalars(query)).all())


async def _target_convention(s: AsyncSession, engine: Engine, corpus_id: str) -> str | None:
    """The convention the build of the engine's current model found in the corpus's target,
    when the quotation marks can be denormalized into it."""
    build = await s.scalar(
        select(Build)
        .where(
            Build.engine_id == engine.id,
            Build.target_model_revision == engine.model_revision,
            Build.state == BuildState.COMPLETED.value,
        )
        .order_by(Build.date_finished.desc())
        .limit(1)
    )
    for entry in (build.analysis or []) if build is not None else []:
        if entry.get("parallelCorpusRef") == corpus_id and entry.get("canDenormalizeQuotes"):
            name = entry.get("targetQuoteConvention")
            return str(name) if name else None
    return None


def _book_usfm(
    store: ModelStore,
    projects: _Projects,
    book: str,
    rows: list[Pretranslation],
    options: UsfmOptions,
    convention: str | None,
) -> str | None:
    """Blocking: the template's book, updated through sil-machine; Auto tries the target
    projects, then the source projects."""
    with tempfile.TemporaryDirectory(prefix="serval-usfm-") as tmp:
        folder = Path(tmp)
        text = None
        if options.template in (UsfmTemplate.AUTO, UsfmTemplate.TARGET):
            text = _first_book(store, folder, "target", projects.target, book, rows, options)
        if text is None and options.template in (UsfmTemplate.AUTO, UsfmTemplate.SOURCE):
            text = _first_book(store, folder, "source", projects.source, book, rows, options)
    if text is None or convention is None:
        return text
    return denormalize_quotation_marks(text, convention)


class _ProjectFailure(Exception):
    """Raised in the worker thread; `usfm` shows the client `public` and an error id."""

    def __init__(self, error_type: type[ServalError], public: str, cause: Exception) -> None:
        super().__init__(public)
        self.error_type, self.public, self.cause = error_type, public, cause


def _first_book(
    store: ModelStore,
    folder: Path,
    side: str,
    keys: list[str],
    book: str,
    rows: list[Pretranslation],
    options: UsfmOptions,
) -> str | None:
    for key in keys:
        path = folder / f"{side}-{len(list(folder.iterdir()))}"
        try:
            store.download_file(key, path)
        except ObjectMissing as e:
            raise _ProjectFailure(FailedPrecondition, f"the {side} Paratext project is gone", e) from None
        except StoreError as e:
            raise _ProjectFailure(
                Unavailable, f"the {side} Paratext project cannot be fetched now", e
            ) from None
        try:
            text = _update_project_book(path, side == "target", book, rows, options)
        except Exception as e:
            raise _ProjectFailure(InvalidArgument, f"the {side} Paratext project cannot be read", e) from None
        if text is not None:
            return text
    return None


def _update_project_book(
    project: Path, is_target: bool, book: str, rows: list[Pretranslation], options: UsfmOptions
) -> str | None:
    """PreservePosition adds sil-machine's place-markers handler, which places markers by the
    rows' word alignments; pretranslations here carry none, so it keeps markers as Preserve does."""
    from machine.corpora import (
        PlaceMarkersUsfmUpdateBlockHandler,
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

    origin = options.text_origin
    if is_target:
        text_behavior = {
            TextOrigin.PREFER_EXISTING: UpdateUsfmTextBehavior.PREFER_EXISTING,
            TextOrigin.PREFER_PRETRANSLATED: UpdateUsfmTextBehavior.PREFER_NEW,
            TextOrigin.ONLY_EXISTING: UpdateUsfmTextBehavior.PREFER_EXISTING,
            TextOrigin.ONLY_PRETRANSLATED: UpdateUsfmTextBehavior.STRIP_EXISTING,
        }[origin]
    else:
        # The source's own words are never "existing" target text: only pretranslations fill verses.
        text_behavior = UpdateUsfmTextBehavior.STRIP_EXISTING
    markers = (options.paragraph_behavior, options.embed_behavior, options.style_behavior)
    handlers = [PlaceMarkersUsfmUpdateBlockHandler()] if MarkerBehavior.PRESERVE_POSITION in markers else []

    with zipfile.ZipFile(project) as archive:
        settings = ZipParatextProjectSettingsParser(archive).parse()
        updates = []
        if origin != TextOrigin.ONLY_EXISTING:
            for row in rows:
                refs = []
                for ref in row.target_refs if is_target else row.source_refs:
                    with contextlib.suppress(ValueError, KeyError, IndexError):
                        parsed = ScriptureRef.parse(str(ref), settings.versification)
                        # The target's USFM structure may differ from the source's the rows follow.
                        refs.append(parsed.to_relaxed() if is_target else parsed)
                if refs:
                    updates.append(UpdateUsfmRow(refs, row.translation))
            updates.sort(key=lambda update: update.refs[0])
        text = ZipParatextProjectTextUpdater(archive).update_usfm(
            book,
            updates,
            text_behavior=text_behavior,
            paragraph_behavior=behavior(options.paragraph_behavior),
            embed_behavior=behavior(options.embed_behavior),
            style_behavior=behavior(options.style_behavior),
            update_block_handlers=handlers,
        )
    return None if text is None else str(text)


def denormalize_quotation_marks(usfm: str, convention_name: str) -> str:
    """The pretranslations' quotation marks, written by the model in the normalized form of the
    target's convention, turned into the convention itself, chapter by chapter where sil-machine's
    first pass finds that safe (as Serval does)."""
    from machine.corpora import UpdateUsfmMarkerBehavior, UpdateUsfmParserHandler, parse_usfm
    from machine.punctuation_analysis import (
        STANDARD_QUOTE_CONVENTIONS,
        QuotationMarkDenormalizationFirstPass,
        QuotationMarkDenormalizationUsfmUpdateBlockHandler,
        QuotationMarkUpdateSettings,
        QuotationMarkUpdateStrategy,
    )

    convention = STANDARD_QUOTE_CONVENTIONS.get_quote_convention_by_name(convention_name)
    if convention is None:
        return usfm
    first_pass = QuotationMarkDenormalizationFirstPass(convention)
    parse_usfm(usfm, first_pass)
    found = dict(first_pass.find_best_chapter_strategies())
    # The settings index strategies by chapter number - 1; chapters the pass did not see apply fully.
    strategies = [
        found.get(chapter, QuotationMarkUpdateStrategy.APPLY_FULL)
        for chapter in range(1, max(found, default=0) + 1)
    ]
    handler = QuotationMarkDenormalizationUsfmUpdateBlockHandler(
        convention, QuotationMarkUpdateSettings(chapter_strategies=strategies)
    )
    # The update pass already applied the marker behaviors: this pass keeps every marker it finds.
    keep = UpdateUsfmMarkerBehavior.PRESERVE
    updater = UpdateUsfmParserHandler(
        paragraph_behavior=keep, embed_behavior=keep, style_behavior=keep, update_block_handlers=[handler]
    )
    parse_usfm(usfm, updater)
    return str(updater.get_usfm())
