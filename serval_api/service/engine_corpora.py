"""Engine corpora: Serval's older engine-scoped corpus (`TranslationCorpus`), one source and one
target language, each side an ordered list of the caller's data files with their text ids.

A build trains on one as on a parallel corpus (source files paired with target files by text id
and ref) and pretranslates its source; its pretranslations carry its id as their `corpusId`.
Like parallel corpora they shape what the engine trains on, so reading needs
`read:translation_engines` and every change `update:translation_engines`.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import DELETE_FILES, READ_ENGINES, UPDATE_ENGINES, Caller
from serval_api.db.models import EngineCorpusRow, utcnow
from serval_api.errors import NotFound
from serval_api.service import files, limits
from serval_api.service.context import Services
from serval_api.service.corpora import CorpusFileRef, resolve_files
from serval_api.service.engines import language, owned_engine
from serval_api.service.keys import new_id

log = logging.getLogger(__name__)


async def owned_engine_corpus(
    s: AsyncSession, caller: Caller, engine_id: str, corpus_id: str
) -> EngineCorpusRow:
    """Another owner's engine, or a corpus of another engine, answers 404."""
    await owned_engine(s, caller, engine_id)
    corpus = await s.get(EngineCorpusRow, corpus_id) if limits.can_be_id(corpus_id) else None
    if corpus is None or corpus.engine_id != engine_id:
        raise NotFound(f"corpus {limits.shown(corpus_id)} not found")
    return corpus


async def engine_corpora_of(s: AsyncSession, engine_id: str) -> list[EngineCorpusRow]:
    query = (
        select(EngineCorpusRow)
        .where(EngineCorpusRow.engine_id == engine_id)
        .order_by(EngineCorpusRow.date_created, EngineCorpusRow.id)
    )
    return list((await s.scalars(query)).all())


async def create_engine_corpus(
    services: Services,
    caller: Caller,
    engine_id: str,
    *,
    source_language: str,
    target_language: str,
    source_files: list[CorpusFileRef],
    target_files: list[CorpusFileRef],
    name: str | None = None,
) -> EngineCorpusRow:
    caller.require(UPDATE_ENGINES)
    source = language("sourceLanguage", source_language)
    target = language("targetLanguage", target_language)
    limits.optional_segment_name("name", name, limits.NAME_CHARS)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id)
        corpus = EngineCorpusRow(
            id=new_id(),
            engine_id=engine_id,
            owner=caller.owner,
            name=name,
            source_language=source.tag,
            target_language=target.tag,
            source_files=await resolve_files(services, s, caller, source_files, "sourceFiles"),
            target_files=await resolve_files(services, s, caller, target_files, "targetFiles"),
            date_created=utcnow(),
        )
        s.add(corpus)
    log.info("engine corpus created", extra={"engine_id": engine_id, "corpus_id": corpus.id})
    return corpus


async def list_engine_corpora(services: Services, caller: Caller, engine_id: str) -> list[EngineCorpusRow]:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id)
        return await engine_corpora_of(s, engine_id)


async def get_engine_corpus(
    services: Services, caller: Caller, engine_id: str, corpus_id: str
) -> EngineCorpusRow:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        return await owned_engine_corpus(s, caller, engine_id, corpus_id)


async def update_engine_corpus(
    services: Services,
    caller: Caller,
    engine_id: str,
    corpus_id: str,
    *,
    source_files: list[CorpusFileRef] | None = None,
    target_files: list[CorpusFileRef] | None = None,
) -> EngineCorpusRow:
    """Replaces the sides given; the next build exports the corpus as it is then."""
    caller.require(UPDATE_ENGINES)
    async with services.db.session() as s:
        corpus = await owned_engine_corpus(s, caller, engine_id, corpus_id)
        if source_files is not None:
            corpus.source_files = await resolve_files(services, s, caller, source_files, "sourceFiles")
        if target_files is not None:
            corpus.target_files = await resolve_files(services, s, caller, target_files, "targetFiles")
    return corpus


async def delete_engine_corpus(
    services: Services, caller: Caller, engine_id: str, corpus_id: str, *, delete_files: bool = False
) -> None:
    """`delete_files` (which needs `delete:files` too) then deletes the data files the corpus named,
    store objects and all, as Serval's `DeleteCorpus` does: a file another corpus names is deleted
    too and removed from that corpus (`files.delete_file`)."""
    caller.require(UPDATE_ENGINES)
    if delete_files:
        caller.require(DELETE_FILES)
    async with services.db.session() as s:
        corpus = await owned_engine_corpus(s, caller, engine_id, corpus_id)
        file_ids = list(dict.fromkeys(f["fileId"] for f in (*corpus.source_files, *corpus.target_files)))
        await s.delete(corpus)
    log.info("engine corpus deleted", extra={"engine_id": engine_id, "corpus_id": corpus_id})
    if not delete_files:
        return
    for file_id in file_ids:
        try:
            await files.delete_file(services, caller, file_id)
        except NotFound:
            log.info("file of a deleted engine corpus already gone", extra={"file_id": file_id})
