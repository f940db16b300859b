"""An engine's parallel corpora: which of the caller's corpora are its source and target sides.

They change what the engine trains on, so reading needs `read:translation_engines` and every
change `update:translation_engines`, as in Serval. Language mismatches are not refused here:
the build export records them as warnings in the build's execution data.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import READ_ENGINES, UPDATE_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, CorpusRow, EngineType, ParallelCorpusRow, utcnow
from serval_api.errors import InvalidArgument, NotFound
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_api.service.keys import new_id

log = logging.getLogger(__name__)


async def _check_corpora(
    services: Services, s: AsyncSession, caller: Caller, field_name: str, ids: list[str]
) -> list[str]:
    """Either side may be empty, as in Serval (`AddParallelCorpus.cs`): no target corpora is how a
    client names books to draft that have no translation yet, and a build or a USFM download that
    uses a parallel corpus without the corpora it needs is refused then. Each corpus named must be
    one of the caller's and have files (Serval: "does not have any files associated with it")."""
    limits.items(field_name, ids, services.settings.api.max_list_items)
    for i, corpus_id in enumerate(ids):
        corpus = await s.get(CorpusRow, corpus_id) if limits.can_be_id(corpus_id) else None
        if corpus is None or corpus.owner != caller.owner:
            raise InvalidArgument(f"{field_name}[{i}]: no corpus {limits.shown(corpus_id)}")
        if not corpus.files:
            raise InvalidArgument(
                f"{field_name}[{i}]: the corpus {corpus.id} does not have any files associated with it; "
                "add files to it first"
            )
    return list(ids)


async def owned_parallel_corpus(
    s: AsyncSession,
    caller: Caller,
    engine_id: str,
    pc_id: str,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> ParallelCorpusRow:
    await owned_engine(s, caller, engine_id, types=types)
    pc = await s.get(ParallelCorpusRow, pc_id) if limits.can_be_id(pc_id) else None
    if pc is None or pc.engine_id != engine_id:
        raise NotFound(f"parallel corpus {limits.shown(pc_id)} not found")
    return pc


async def create_parallel_corpus(
    services: Services,
    caller: Caller,
    engine_id: str,
    *,
    source_corpus_ids: list[str],
    target_corpus_ids: list[str],
    name: str | None = None,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> ParallelCorpusRow:
    caller.require(UPDATE_ENGINES)
    limits.optional_segment_name("name", name, limits.NAME_CHARS)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id, types=types)
        pc = ParallelCorpusRow(
            id=new_id(),
            engine_id=engine_id,
            owner=caller.owner,
            name=name,
            source_corpus_ids=await _check_corpora(services, s, caller, "sourceCorpusIds", source_corpus_ids),
            target_corpus_ids=await _check_corpora(services, s, caller, "targetCorpusIds", target_corpus_ids),
            date_created=utcnow(),
        )
        s.add(pc)
    log.info("parallel corpus created", extra={"engine_id": engine_id, "parallel_corpus_id": pc.id})
    return pc


async def list_parallel_corpora(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> list[ParallelCorpusRow]:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id, types=types)
        return await engine_parallel_corpora(s, engine_id)


async def engine_parallel_corpora(s: AsyncSession, engine_id: str) -> list[ParallelCorpusRow]:
    query = (
        select(ParallelCorpusRow)
        .where(ParallelCorpusRow.engine_id == engine_id)
        .order_by(ParallelCorpusRow.date_created, ParallelCorpusRow.id)
    )
    return list((await s.scalars(query)).all())


async def get_parallel_corpus(
    services: Services,
    caller: Caller,
    engine_id: str,
    pc_id: str,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> ParallelCorpusRow:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        return await owned_parallel_corpus(s, caller, engine_id, pc_id, types)


async def update_parallel_corpus(
    services: Services,
    caller: Caller,
    engine_id: str,
    pc_id: str,
    *,
    source_corpus_ids: list[str] | None = None,
    target_corpus_ids: list[str] | None = None,
    name: str | None = None,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> ParallelCorpusRow:
    caller.require(UPDATE_ENGINES)
    limits.optional_segment_name("name", name, limits.NAME_CHARS)
    async with services.db.session() as s:
        pc = await owned_parallel_corpus(s, caller, engine_id, pc_id, types)
        if source_corpus_ids is not None:
            pc.source_corpus_ids = await _check_corpora(
                services, s, caller, "sourceCorpusIds", source_corpus_ids
            )
        if target_corpus_ids is not None:
            pc.target_corpus_ids = await _check_corpora(
                services, s, caller, "targetCorpusIds", target_corpus_ids
            )
        if name is not None:
            pc.name = name
    return pc


async def delete_parallel_corpus(
    services: Services,
    caller: Caller,
    engine_id: str,
    pc_id: str,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> None:
    caller.require(UPDATE_ENGINES)
    async with services.db.session() as s:
        await s.delete(await owned_parallel_corpus(s, caller, engine_id, pc_id, types))
    log.info("parallel corpus deleted", extra={"engine_id": engine_id, "parallel_corpus_id": pc_id})
