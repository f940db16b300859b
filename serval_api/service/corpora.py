"""Corpora: a language and an ordered list of the caller's data files, each with a text id.

A `fileId` that is unknown or another owner's is the same 400 (never 404), so a corpus body cannot
probe for other owners' files. A corpus named in the path that is another owner's answers 403.

Serval's corpora answer to the files scopes (`read:files`, `create:files`, `update:files`,
`delete:files`); so do these, and to this service's older `*:corpora` scopes too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import (
    CREATE_CORPORA,
    CREATE_FILES,
    DELETE_CORPORA,
    DELETE_FILES,
    READ_CORPORA,
    READ_FILES,
    UPDATE_CORPORA,
    UPDATE_FILES,
    Caller,
)
from serval_api.db.models import CorpusRow, DataFileRow, ParallelCorpusRow, utcnow
from serval_api.errors import Conflict, InvalidArgument
from serval_api.service import limits, owners
from serval_api.service.context import Services
from serval_api.service.engines import language
from serval_api.service.files import default_text_id
from serval_api.service.keys import new_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusFileRef:
    file_id: str
    text_id: str | None = None


async def owned_corpus(s: AsyncSession, caller: Caller, corpus_id: str, *, lock: bool = False) -> CorpusRow:
    """The caller's corpus: 404 when missing, 403 when another owner's (`owners.check_owner`)."""
    if not limits.can_be_id(corpus_id):
        raise owners.not_found("corpus", corpus_id)
    corpus = await s.get(CorpusRow, corpus_id, with_for_update=True if lock else None)
    return owners.check_owner(corpus, caller, "corpus", corpus_id)


async def resolve_files(
    services: Services, s: AsyncSession, caller: Caller, refs: list[CorpusFileRef], field_name: str = "files"
) -> list[dict[str, str]]:
    """A text id names the text in pretranslations, so it fits their column; a file's name gives
    the default one."""
    limits.items(field_name, refs, services.settings.api.max_list_items)
    entries = []
    for i, ref in enumerate(refs):
        file = await s.get(DataFileRow, ref.file_id) if limits.can_be_id(ref.file_id) else None
        if file is None or file.owner != caller.owner:
            raise InvalidArgument(f"{field_name}[{i}].fileId: no file {limits.shown(ref.file_id)}")
        text_id = ref.text_id or default_text_id(file)
        limits.segment_name(f"{field_name}[{i}].textId", text_id, limits.TEXT_ID_CHARS)
        entries.append({"fileId": file.id, "textId": text_id})
    return entries


async def create_corpus(
    services: Services,
    caller: Caller,
    *,
    language_tag: str,
    files: list[CorpusFileRef],
    name: str | None = None,
) -> CorpusRow:
    caller.require(CREATE_FILES, CREATE_CORPORA)
    lang = language("language", language_tag)
    limits.optional_segment_name("name", name, limits.NAME_CHARS)
    async with services.db.session() as s:
        corpus = CorpusRow(
            id=new_id(),
            owner=caller.owner,
            name=name,
            language=lang.tag,
            revision=1,
            files=await resolve_files(services, s, caller, files),
            date_created=utcnow(),
        )
        s.add(corpus)
    log.info("corpus created", extra={"corpus_id": corpus.id, "files": len(corpus.files)})
    return corpus


async def list_corpora(services: Services, caller: Caller) -> list[CorpusRow]:
    caller.require(READ_FILES, READ_CORPORA)
    query = (
        select(CorpusRow)
        .where(CorpusRow.owner == caller.owner)
        .order_by(CorpusRow.date_created, CorpusRow.id)
    )
    async with services.db.session() as s:
        return list((await s.scalars(query)).all())


async def get_corpus(services: Services, caller: Caller, corpus_id: str) -> CorpusRow:
    caller.require(READ_FILES, READ_CORPORA)
    async with services.db.session() as s:
        return await owned_corpus(s, caller, corpus_id)


async def update_corpus(
    services: Services,
    caller: Caller,
    corpus_id: str,
    *,
    language_tag: str | None = None,
    files: list[CorpusFileRef] | None = None,
    name: str | None = None,
) -> CorpusRow:
    """Replaces the fields given; the next build exports the corpus as it is then."""
    caller.require(UPDATE_FILES, UPDATE_CORPORA)
    lang = language("language", language_tag) if language_tag is not None else None
    limits.optional_segment_name("name", name, limits.NAME_CHARS)
    async with services.db.session() as s:
        corpus = await owned_corpus(s, caller, corpus_id, lock=True)
        if lang is not None:
            corpus.language = lang.tag
        if files is not None:
            corpus.files = await resolve_files(services, s, caller, files)
        if name is not None:
            corpus.name = name
        corpus.revision += 1
    return corpus


async def delete_corpus(services: Services, caller: Caller, corpus_id: str) -> None:
    """A corpus that a parallel corpus still names cannot be deleted (409)."""
    caller.require(DELETE_FILES, DELETE_CORPORA)
    async with services.db.session() as s:
        corpus = await owned_corpus(s, caller, corpus_id)
        query = select(ParallelCorpusRow).where(ParallelCorpusRow.owner == caller.owner)
        for pc in (await s.scalars(query)).all():
            if corpus_id in pc.source_corpus_ids or corpus_id in pc.target_corpus_ids:
                raise Conflict(
                    f"corpus {corpus_id} is used by parallel corpus {pc.id} of engine {pc.engine_id}"
                )
        await s.delete(corpus)
    log.info("corpus deleted", extra={"corpus_id": corpus_id})
