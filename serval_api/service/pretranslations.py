"""Pretranslations: the segments a build job translated for the corpora its build named in
`pretranslate`, streamed back over InsertPretranslations and read by clients.

A row carries the id of the corpus it came from (`corpusId` in the build export: a parallel
corpus, or an engine corpus of Serval's older API) and is
tagged with its build and the build's target model revision. Clients see the rows of the build
that made the engine's current `modelRevision`, so a build's rows appear together when it
completes; its completion removes every other build's rows for the engine, and a build that
faults, is canceled or restarts loses its own. A word-alignment build's rows
(`word_alignment.py`) arrive, and follow its revisions, the same way: `insert_rows`,
`build_finished` and `discard` serve both tables. A book rendered as USFM from these rows is
`pretranslation_usfm.py`'s.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy import Delete, delete, select
from sqlalchemy import insert as sql_insert
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import (
    BuildRow,
    BuildState,
    CorpusRow,
    DataFileRow,
    EngineRow,
    PretranslationRow,
    WordAlignmentRow,
)
from serval_api.errors import (
    InvalidArgument,
    NotBuilt,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.engine_corpora import owned_engine_corpus
from serval_api.service.engines import owned_engine
from serval_api.service.file_contents import contents_key
from serval_api.service.files import FileFormat
from serval_api.service.job_auth import authorize_job_for_engine
from serval_api.service.parallel_corpora import owned_parallel_corpus
from serval_common.build_options import is_micro_build

log = logging.getLogger(__name__)

INSERT_BATCH = 500
"""Rows written per transaction while a stream arrives."""

ResultTable = type[PretranslationRow] | type[WordAlignmentRow]
"""The tables of rows a build job streams back for its build's model revision."""

RESULT_TABLES: tuple[ResultTable, ...] = (PretranslationRow, WordAlignmentRow)


class StreamedRow(Protocol):
    """What every row a build job streams back carries: where it belongs and which verses."""

    @property
    def engine_id(self) -> str: ...
    @property
    def corpus_id(self) -> str: ...
    @property
    def text_id(self) -> str: ...
    @property
    def source_refs(self) -> list[str]: ...
    @property
    def target_refs(self) -> list[str]: ...


R = TypeVar("R", bound=StreamedRow)


@dataclass(frozen=True)
class PretranslationInsert:
    """One InsertPretranslations message, as the service takes it."""

    engine_id: str
    corpus_id: str
    text_id: str
    translation: str
    source_refs: list[str] = field(default_factory=list)
    target_refs: list[str] = field(default_factory=list)
    confidence: float = 0.0


@dataclass(frozen=True)
class CorpusProjects:
    """The Paratext projects (data file locations, in corpus and file order) of a corpus's two sides;
    `first_source`: the key of the source's first file when that file is a Paratext project (its
    name and versification are the remarks' source project, as in Serval)."""

    corpus_id: str
    source: list[str]
    target: list[str]
    first_source: str | None = None
    has_source_corpus: bool = True
    """False for a parallel corpus with no source corpora (which Serval accepts when created)."""


async def insert(services: Services, token: str | None, rows: AsyncIterable[PretranslationInsert]) -> int:
    return await insert_rows(services, token, rows, PretranslationRow, _validated)


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


def check_streamed_row(where: str, row: StreamedRow, engine_id: str, max_items: int) -> None:
    """The checks every streamed row passes (pretranslations and word alignments alike): the
    stream's engine, a corpus and text id of bounded length without NULs, bounded refs."""
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
    limits.items(f"{where}: source_refs", row.source_refs, max_items)
    limits.items(f"{where}: target_refs", row.target_refs, max_items)


def _validated(row: PretranslationInsert, engine_id: str, index: int, max_items: int) -> dict[str, Any]:
    where = f"pretranslation {index}"
    check_streamed_row(where, row, engine_id, max_items)
    limits.no_nul(f"{where}: translation", row.translation)
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
        await s.get(EngineRow, engine_id, with_for_update=True)
        build = await s.get(BuildRow, build_id, with_for_update=True)
        if build is None or not build.build_state.is_running:
            state = build.state if build is not None else "gone"
            what = table.__tablename__.replace("_", " ")
            raise NotBuilt(f"build {build_id} is {state}; it accepts no more {what}")
        if replace:
            await s.execute(delete(table).where(table.build_id == build_id))
        tag = {"engine_id": engine_id, "build_id": build_id, "model_revision": build.target_model_revision}
        await s.execute(sql_insert(table), [{**row, **tag} for row in batch])


async def write_build_rows(
    services: Services, table: ResultTable, build: BuildRow, rows: list[dict[str, Any]]
) -> None:
    """Rows a build made inside the API service (an echo build), checked like a job's stream:
    refused once the build is no longer running."""
    if rows:
        await _write(services, table, build.engine_id, build.id, rows, replace=True)


async def build_finished(services: Services, build: BuildRow) -> None:
    """A completed build's rows (pretranslations, word alignments) replace every other build's
    rows of the engine (but a micro-build, which makes none, keeps them); a faulted or canceled
    build's own rows go."""
    if build.build_state == BuildState.COMPLETED and not is_micro_build(build.options):
        for table in RESULT_TABLES:
            query = delete(table).where(table.engine_id == build.engine_id, table.build_id != build.id)
            await _delete(services, build, table, query)
    elif build.build_state != BuildState.COMPLETED and not build.build_state.is_running:
        await discard(services, build)


async def discard(services: Services, build: BuildRow) -> None:
    """Remove the build's own rows (it failed, or restarts and will send them again)."""
    for table in RESULT_TABLES:
        await _delete(services, build, table, delete(table).where(table.build_id == build.id))


async def _delete(services: Services, build: BuildRow, table: ResultTable, query: Delete) -> None:
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
) -> list[PretranslationRow]:
    """The rows of the engine's current model for one of its corpora, in source order.
    `engine_corpus`: `corpus_id` names an engine corpus, or else (as before engine corpora) a
    parallel corpus; otherwise a parallel corpus."""
    caller.require(READ_ENGINES)
    limits.optional_text("textId", text_id, limits.TEXT_ID_CHARS)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id)
        projects = await corpus_projects(s, caller, engine_id, corpus_id, engine_corpus=engine_corpus)
        require_built(engine)
        return await current_rows(s, PretranslationRow, engine, projects.corpus_id, text_id)


def require_built(engine: EngineRow) -> None:
    if engine.model_revision == 0:
        raise NotBuilt(f"engine {engine.id} has no completed build, so no pretranslations")


async def corpus_projects(
    s: AsyncSession, caller: Caller, engine_id: str, corpus_id: str, *, engine_corpus: bool
) -> CorpusProjects:
    if engine_corpus:
        with contextlib.suppress(NotFound):
            found = await owned_engine_corpus(s, caller, engine_id, corpus_id)
            source_ids = [f["fileId"] for f in found.source_files]
            return CorpusProjects(
                found.id,
                await _paratext_keys(s, caller, source_ids),
                await _paratext_keys(s, caller, [f["fileId"] for f in found.target_files]),
                await _first_paratext_key(s, caller, source_ids),
            )
    try:
        pc = await owned_parallel_corpus(s, caller, engine_id, corpus_id)
    except NotFound:
        if engine_corpus:
            raise NotFound(f"corpus {limits.shown(corpus_id)} not found") from None
        raise
    source_ids = await _corpus_file_ids(s, pc.source_corpus_ids)
    return CorpusProjects(
        pc.id,
        await _paratext_keys(s, caller, source_ids),
        await _paratext_keys(s, caller, await _corpus_file_ids(s, pc.target_corpus_ids)),
        await _first_paratext_key(s, caller, source_ids),
        has_source_corpus=bool(pc.source_corpus_ids),
    )


async def _corpus_file_ids(s: AsyncSession, corpus_ids: Sequence[str]) -> list[str]:
    ids: list[str] = []
    for corpus_id in corpus_ids:
        corpus = await s.get(CorpusRow, corpus_id)
        ids.extend(entry["fileId"] for entry in (corpus.files if corpus is not None else ()))
    return ids


async def _paratext_keys(s: AsyncSession, caller: Caller, file_ids: Sequence[str]) -> list[str]:
    """Locations (`contents_key`) of the caller's Paratext project files among `file_ids`, in order."""
    keys = []
    for file_id in file_ids:
        file = await s.get(DataFileRow, file_id)
        if file is not None and file.owner == caller.owner and file.format == FileFormat.PARATEXT.value:
            keys.append(contents_key(file.id))
    return keys


async def _first_paratext_key(s: AsyncSession, caller: Caller, file_ids: Sequence[str]) -> str | None:
    first = await _paratext_keys(s, caller, file_ids[:1])
    return first[0] if first else None


Row = TypeVar("Row", PretranslationRow, WordAlignmentRow)


async def current_rows(
    s: AsyncSession, table: type[Row], engine: EngineRow, corpus_id: str, text_id: str | None
) -> list[Row]:
    """The rows (pretranslations or word alignments) a completed build of the engine's current
    model revision streamed for one corpus, in the order the job sent them."""
    query = (
        select(table)
        .join(BuildRow, BuildRow.id == table.build_id)
        .where(
            table.engine_id == engine.id,
            table.model_revision == engine.drafts_revision,
            table.corpus_id == corpus_id,
            BuildRow.state == BuildState.COMPLETED.value,
        )
        .order_by(table.id)
    )
    if text_id is not None:
        query = query.where(table.text_id == text_id)
    return list((await s.scalars(query)).all())
