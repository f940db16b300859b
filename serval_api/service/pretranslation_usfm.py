"""Pretranslated USFM: a Paratext project's book with its verse texts taken from the
pretranslations of the engine's current model and/or the target's existing text, as Serval's
UsfmGenerationService makes it (sil-machine's updater, the AI-draft remarks of `usfm_remarks`,
and the quotation-mark denormalization). The rows themselves are stored and read in
`pretranslations.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import BuildRow, BuildState, EngineRow, PretranslationRow
from serval_api.errors import FailedPrecondition, InvalidArgument, ServalError, Unavailable, concealed
from serval_api.service import limits, pretranslations, usfm_remarks
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_api.service.file_contents import ContentsReader, Downloads
from serval_common.store import ObjectMissing, StoreError

log = logging.getLogger(__name__)


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
    quotation_marks: QuotationMarkBehavior = QuotationMarkBehavior.NORMALIZED


@dataclass(frozen=True)
class _DraftBuild:
    """What the build of the engine's current model gives the remarks and quotation marks."""

    finished: datetime | None = None
    pretranslate: list[Any] | None = None
    convention: str | None = None


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
        projects = await pretranslations.corpus_projects(
            s, caller, engine_id, corpus_id, engine_corpus=engine_corpus
        )
        pretranslations.require_built(engine)
        if not projects.has_source_corpus:
            raise InvalidArgument(
                f"the parallel corpus {projects.corpus_id} has no source corpora; give it a source "
                "corpus (PATCH its sourceCorpusIds) to draft USFM from"
            )
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
        rows = await pretranslations.current_rows(s, PretranslationRow, engine, projects.corpus_id, text_id)
        draft = await _draft_build(s, engine, projects.corpus_id)
    if options.quotation_marks != QuotationMarkBehavior.DENORMALIZED:
        draft = replace(draft, convention=None)
    store = ContentsReader(services, services.store)
    try:
        # The default executor: its store reads go to the store's own threads (ContentsReader).
        book = await asyncio.to_thread(_book_usfm, store, projects, text_id, rows, options, draft)
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
            "convention": draft.convention or "none",
            "found": book is not None,
        },
    )
    return book


async def _draft_build(s: AsyncSession, engine: EngineRow, corpus_id: str) -> _DraftBuild:
    """The build of the engine's current model: when it finished, what it pretranslated, and the
    convention it found in the corpus's target when the quotation marks can be denormalized into it."""
    build = await s.scalar(
        select(BuildRow)
        .where(
            BuildRow.engine_id == engine.id,
            BuildRow.target_model_revision == engine.drafts_revision,
            BuildRow.state == BuildState.COMPLETED.value,
        )
        .order_by(BuildRow.date_finished.desc())
        .limit(1)
    )
    if build is None:
        return _DraftBuild()
    convention = None
    for entry in build.analysis or []:
        if entry.parallel_corpus_ref == corpus_id and entry.can_denormalize_quotes:
            convention = entry.target_quote_convention or None
            break
    return _DraftBuild(build.date_finished, build.pretranslate, convention)


def _book_usfm(
    store: Downloads,
    projects: pretranslations.CorpusProjects,
    book: str,
    rows: list[PretranslationRow],
    options: UsfmOptions,
    draft: _DraftBuild,
) -> str | None:
    """Blocking: the template's book, updated through sil-machine; Auto tries the target
    projects, then the source projects. As in Serval, the build's pretranslate scripture ranges
    choose the book's chapters, and each chapter gets the AI-draft remarks (`usfm_remarks`),
    added by the quotation-mark pass when there is one."""
    from machine.scripture import ORIGINAL_VERSIFICATION, book_id_to_number

    with tempfile.TemporaryDirectory(prefix="serval-usfm-") as tmp:
        folder = Path(tmp)
        settings = _source_settings(store, folder, projects.first_source)
        versification = settings.versification if settings is not None else ORIGINAL_VERSIFICATION
        last_chapter = versification.get_last_chapter(book_id_to_number(book))
        chapters = usfm_remarks.pretranslate_chapters(draft.pretranslate, book, last_chapter) or None
        remarks = (
            usfm_remarks.draft_remarks(
                book,
                chapters or range(1, last_chapter + 1),
                settings.name if settings is not None else None,
                draft.finished,
                options.paragraph_behavior,
            )
            if draft.finished is not None
            else []
        )
        update = _BookUpdate(rows, options, chapters, [] if draft.convention else remarks)
        text = None
        if options.template in (UsfmTemplate.AUTO, UsfmTemplate.TARGET):
            text = _first_book(store, folder, "target", projects.target, book, update)
        if text is None and options.template in (UsfmTemplate.AUTO, UsfmTemplate.SOURCE):
            text = _first_book(store, folder, "source", projects.source, book, update)
    if text is None or draft.convention is None:
        return text
    return denormalize_quotation_marks(text, draft.convention, remarks)


@dataclass(frozen=True)
class _BookUpdate:
    """What `_update_project_book` writes into a project's book."""

    rows: list[PretranslationRow]
    options: UsfmOptions
    chapters: list[int] | None
    """Only these chapters (None: all)."""
    remarks: list[usfm_remarks.Remark]


class _ProjectFailure(Exception):
    """Raised in the worker thread; `usfm` shows the client `public` and an error id."""

    def __init__(self, error_type: type[ServalError], public: str, cause: Exception) -> None:
        super().__init__(public)
        self.error_type, self.public, self.cause = error_type, public, cause


def _download(store: Downloads, folder: Path, side: str, key: str) -> Path:
    path = folder / f"{side}-{len(list(folder.iterdir()))}"
    try:
        store.download_file(key, path)
    except ObjectMissing as e:
        raise _ProjectFailure(FailedPrecondition, f"the {side} Paratext project is gone", e) from None
    except StoreError as e:
        raise _ProjectFailure(Unavailable, f"the {side} Paratext project cannot be fetched now", e) from None
    return path


def _source_settings(store: Downloads, folder: Path, key: str | None) -> Any:
    """The first source file's Paratext settings (sil-machine's ParatextProjectSettings), or None
    when that file is no Paratext project."""
    if key is None:
        return None
    from machine.corpora import ZipParatextProjectSettingsParser

    path = _download(store, folder, "source", key)
    try:
        with zipfile.ZipFile(path) as archive:
            return ZipParatextProjectSettingsParser(archive).parse()
    except Exception as e:
        raise _ProjectFailure(InvalidArgument, "the source Paratext project cannot be read", e) from None


def _first_book(
    store: Downloads, folder: Path, side: str, keys: list[str], book: str, update: _BookUpdate
) -> str | None:
    for key in keys:
        path = _download(store, folder, side, key)
        try:
            text = _update_project_book(path, side == "target", book, update)
        except Exception as e:
            raise _ProjectFailure(InvalidArgument, f"the {side} Paratext project cannot be read", e) from None
        if text is not None:
            return text
    return None


def _update_project_book(project: Path, is_target: bool, book: str, update: _BookUpdate) -> str | None:
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

    options = update.options
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
            for row in update.rows:
                refs = []
                for ref in row.target_refs if is_target else row.source_refs:
                    with contextlib.suppress(ValueError, KeyError, IndexError):
                        parsed = ScriptureRef.parse(str(ref), settings.versification)
                        # The target's USFM structure may differ from the source's the rows follow.
                        refs.append(parsed.to_relaxed() if is_target else parsed)
                if refs:
                    updates.append(UpdateUsfmRow(refs, row.translation))
            updates.sort(key=lambda row: row.refs[0])
        text = ZipParatextProjectTextUpdater(archive).update_usfm(
            book,
            updates,
            chapters=update.chapters,
            text_behavior=text_behavior,
            paragraph_behavior=behavior(options.paragraph_behavior),
            embed_behavior=behavior(options.embed_behavior),
            style_behavior=behavior(options.style_behavior),
            update_block_handlers=handlers,
            remarks=update.remarks,
        )
    return None if text is None else str(text)


def denormalize_quotation_marks(
    usfm: str, convention_name: str, remarks: Sequence[usfm_remarks.Remark] = ()
) -> str:
    """The pretranslations' quotation marks, written by the model in the normalized form of the
    target's convention, turned into the convention itself, chapter by chapter where sil-machine's
    first pass finds that safe (as Serval does). This pass adds `remarks`, with Serval's
    quotation-mark sentence for as many chapters as it does not skip."""
    from machine.corpora import UpdateUsfmMarkerBehavior, UpdateUsfmParserHandler, parse_usfm
    from machine.punctuation_analysis import (
        STANDARD_QUOTE_CONVENTIONS,
        QuotationMarkDenormalizationFirstPass,
        QuotationMarkDenormalizationUsfmUpdateBlockHandler,
        QuotationMarkUpdateSettings,
        QuotationMarkUpdateStrategy,
    )

    # The update pass already applied the marker behaviors: this pass keeps every marker it finds.
    keep = UpdateUsfmMarkerBehavior.PRESERVE
    convention = STANDARD_QUOTE_CONVENTIONS.get_quote_convention_by_name(convention_name)
    if convention is None:
        # Serval returns the book without its remarks here; a draft still says it is one.
        updater = UpdateUsfmParserHandler(
            paragraph_behavior=keep, embed_behavior=keep, style_behavior=keep, remarks=remarks
        )
        parse_usfm(usfm, updater)
        return str(updater.get_usfm())
    first_pass = QuotationMarkDenormalizationFirstPass(convention)
    parse_usfm(usfm, first_pass)
    best = first_pass.find_best_chapter_strategies()
    found = dict(best)
    # The settings index strategies by chapter number - 1; chapters the pass did not see apply fully.
    strategies = [
        found.get(chapter, QuotationMarkUpdateStrategy.APPLY_FULL)
        for chapter in range(1, max(found, default=0) + 1)
    ]
    handler = QuotationMarkDenormalizationUsfmUpdateBlockHandler(
        convention, QuotationMarkUpdateSettings(chapter_strategies=strategies)
    )
    denormalized = sum(1 for _, strategy in best if strategy != QuotationMarkUpdateStrategy.SKIP)
    updater = UpdateUsfmParserHandler(
        paragraph_behavior=keep,
        embed_behavior=keep,
        style_behavior=keep,
        update_block_handlers=[handler],
        remarks=usfm_remarks.with_quotation_remarks(remarks, denormalized),
    )
    parse_usfm(usfm, updater)
    return str(updater.get_usfm())
