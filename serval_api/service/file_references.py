"""What deleting a data file does to what names it, as Serval's `DataFileDeleted` handlers do
(`Serval.Translation/Handlers/DataFileDeletedHandler.cs`, and the word-alignment one): the file
leaves every corpus and engine corpus of its owner that names it, and the pretranslations and word
alignments read from those corpora go, since they no longer match their source. Serval deletes the
rows of every parallel corpus of an engine that uses the file; here only the parallel corpora that
use it (through one of their corpora) lose theirs."""

from __future__ import annotations

import logging

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.models import (
    CorpusRow,
    EngineCorpusRow,
    EngineRow,
    ParallelCorpusRow,
    PretranslationRow,
    WordAlignmentRow,
)

log = logging.getLogger(__name__)


async def remove_file_everywhere(s: AsyncSession, owner: str, file_id: str) -> None:
    """In the caller's transaction: `file_id` out of the owner's corpora and engine corpora, and
    the rows built from them deleted."""
    changed_corpora: set[str] = set()
    for corpus in (
        await s.scalars(select(CorpusRow).where(CorpusRow.owner == owner).with_for_update())
    ).all():
        kept = [entry for entry in corpus.files if entry["fileId"] != file_id]
        if len(kept) != len(corpus.files):
            corpus.files = kept
            corpus.revision += 1
            changed_corpora.add(corpus.id)
            log.info("file removed from corpus", extra={"file_id": file_id, "corpus_id": corpus.id})
    outputs: set[str] = set()
    query = select(EngineCorpusRow).where(EngineCorpusRow.owner == owner).with_for_update()
    for ec in (await s.scalars(query)).all():
        source = [entry for entry in ec.source_files if entry["fileId"] != file_id]
        target = [entry for entry in ec.target_files if entry["fileId"] != file_id]
        if (len(source), len(target)) != (len(ec.source_files), len(ec.target_files)):
            ec.source_files, ec.target_files = source, target
            outputs.add(ec.id)
            log.info(
                "file removed from engine corpus",
                extra={"file_id": file_id, "engine_id": ec.engine_id, "corpus_id": ec.id},
            )
    if changed_corpora:
        for pc in (await s.scalars(select(ParallelCorpusRow).where(ParallelCorpusRow.owner == owner))).all():
            if changed_corpora & {*pc.source_corpus_ids, *pc.target_corpus_ids}:
                outputs.add(pc.id)
    if outputs:
        owned = select(EngineRow.id).where(EngineRow.owner == owner)
        for table in (PretranslationRow, WordAlignmentRow):
            await s.execute(delete(table).where(table.corpus_id.in_(outputs), table.engine_id.in_(owned)))
        log.info(
            "rows of corpora that used the file deleted",
            extra={"file_id": file_id, "corpora": sorted(outputs)},
        )
