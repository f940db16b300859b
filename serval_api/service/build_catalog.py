"""Which corpora and texts a build reads: its catalog, and what its entries choose of it.

The catalog is the corpora a build's entries may name: the engine's stored parallel corpora and
engine corpora with their files (`stored_catalog`), or the corpora a gRPC `StartBuild` carries,
once each file's location is checked to be one of the caller's data files (`owned_locations`).
`chosen_corpora` keeps the corpora the (resolved, `build_corpora.resolve`) `trainOn` and
`pretranslate` entries name, each side's corpora carrying the `TextFilter`s chosen of them: an
entry's `textIds` and `scriptureRange` (`parse_scripture_range`), replaced per corpus by a side's
`sourceFilters` / `targetFilters`. This stands apart from reading the files (`corpus_files.py`)
and pairing their segments (`build_segments.py`): it reads the database, never a file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import Caller
from serval_api.db.models import CorpusRow, DataFileRow
from serval_api.errors import InvalidArgument
from serval_api.service import corpus_files, limits
from serval_api.service.build_corpora import CorpusFilter, PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.corpus_files import (
    ENGINE_CORPUS,
    PARALLEL_CORPUS,
    CorpusFileSource,
    MonolingualSource,
    ParallelSource,
    TextFilter,
)
from serval_api.service.engine_corpora import engine_corpora_of
from serval_api.service.file_contents import contents_key
from serval_api.service.files import FileFormat
from serval_api.service.parallel_corpora import engine_parallel_corpora

_RANGE_PART = re.compile(r"^([A-Z0-9]{3})(?:(\d+)(?:-(\d+))?)?$")


ALL_TEXTS = TextFilter(everything=True)


def parse_scripture_range(value: str, field_name: str) -> TextFilter:
    """`MAT;MRK1-3;LUK2` → whole MAT, MRK chapters 1–3, LUK chapter 2."""
    chapters: dict[str, frozenset[int]] = {}
    for part in filter(None, (p.strip().upper() for p in value.split(";"))):
        match = _RANGE_PART.match(part.replace(" ", ""))
        if match is None:
            raise InvalidArgument(
                f"{field_name}: cannot read {part!r}; use books and chapters like 'MAT;MRK1-3'"
            )
        book, first, last = match.groups()
        wanted = frozenset(range(int(first), int(last or first) + 1)) if first else frozenset()
        whole = not wanted or (book in chapters and not chapters[book])
        chapters[book] = frozenset() if whole else chapters.get(book, frozenset()) | wanted
    return TextFilter(chapters=chapters)


async def owned_locations(s: AsyncSession, caller: Caller, pc: ParallelSource) -> ParallelSource:
    """A gRPC corpus file's `location` must name one of the caller's data files (`files/{id}` or
    `files/{id}/contents`): other store keys and local paths would read other owners' data."""

    async def owned(corpus: MonolingualSource) -> MonolingualSource:
        files = []
        for file in corpus.files:
            match = corpus_files.FILE_LOCATION.match(file.location)
            record = await s.get(DataFileRow, match.group(1)) if match else None
            if record is None or record.owner != caller.owner:
                raise InvalidArgument(
                    f"corpus {limits.shown(corpus.id)}: location {limits.shown(file.location)} "
                    "is not one of your files"
                )
            files.append(replace(file, location=contents_key(record.id)))
        return replace(corpus, files=tuple(files))

    return replace(
        pc,
        source=tuple([await owned(c) for c in pc.source]),
        target=tuple([await owned(c) for c in pc.target]),
    )


async def stored_catalog(s: AsyncSession, engine_id: str) -> list[ParallelSource]:
    """The engine's parallel corpora, then its engine corpora, with their files; no texts chosen."""
    stored = await engine_parallel_corpora(s, engine_id)
    engine_corpora = await engine_corpora_of(s, engine_id)
    corpus_ids = {c for pc in stored for c in (*pc.source_corpus_ids, *pc.target_corpus_ids)}
    corpora = {c: await s.get(CorpusRow, c) for c in corpus_ids}
    file_ids = {f["fileId"] for corpus in corpora.values() if corpus for f in corpus.files}
    file_ids |= {f["fileId"] for ec in engine_corpora for f in (*ec.source_files, *ec.target_files)}
    files = {f: await s.get(DataFileRow, f) for f in file_ids}

    def file_sources(entries: list[Any]) -> tuple[CorpusFileSource, ...]:
        return tuple(
            CorpusFileSource(contents_key(f.id), FileFormat(f.format), entry["textId"])
            for entry in entries
            if (f := files.get(entry["fileId"])) is not None
        )

    def monolingual(corpus_id: str) -> MonolingualSource:
        corpus = corpora[corpus_id]
        if corpus is None:
            return MonolingualSource(id=corpus_id, language="", files=())
        return MonolingualSource(corpus.id, corpus.language, file_sources(corpus.files))

    catalog = [
        ParallelSource(
            id=pc.id,
            source=tuple(monolingual(c) for c in pc.source_corpus_ids),
            target=tuple(monolingual(c) for c in pc.target_corpus_ids),
        )
        for pc in stored
    ]
    catalog += [
        ParallelSource(
            id=ec.id,
            kind=ENGINE_CORPUS,
            source=(MonolingualSource(ec.id, ec.source_language, file_sources(ec.source_files)),),
            target=(MonolingualSource(ec.id, ec.target_language, file_sources(ec.target_files)),),
        )
        for ec in engine_corpora
    ]
    return catalog


def check_named_corpora(
    catalog: Sequence[ParallelSource],
    field: str,
    entries: Sequence[TrainingEntry | PretranslateEntry | WordAlignEntry] | None,
) -> None:
    """Serval's refusals (`StartBuild.cs`, 400) of the stored corpora that (resolved) entries name:
    an engine corpus with no files on either side; a parallel corpus with no source and no target
    corpora; and, to train on (`trainOn`), a parallel corpus one of whose corpora has no files (a
    corpus whose files were all deleted). Corpora the entries leave out are not checked, as in Serval."""
    by_key: dict[tuple[str, str | None], ParallelSource] = {(pc.kind, pc.id): pc for pc in catalog}
    for i, entry in enumerate(entries or ()):
        where = f"{field}[{i}]"
        if entry.parallel_corpus_id is None:
            engine_corpus = by_key.get((ENGINE_CORPUS, entry.corpus_id))
            if engine_corpus is not None and not any(
                side.files for side in (*engine_corpus.source, *engine_corpus.target)
            ):
                raise InvalidArgument(
                    f"{where}: the corpus {engine_corpus.id} is not valid: it does not have any source or "
                    "target files; give it files (PATCH its sourceFiles or targetFiles) or leave it out"
                )
            continue
        pc = by_key.get((PARALLEL_CORPUS, entry.parallel_corpus_id))
        if pc is None:
            continue
        if not pc.source and not pc.target:
            raise InvalidArgument(
                f"{where}: the parallel corpus {pc.id} does not have source or target corpora associated "
                "with it; give it corpora (PATCH its sourceCorpusIds and targetCorpusIds) or leave it out"
            )
        if field != "trainOn":
            continue
        for corpus in (*pc.source, *pc.target):
            if not corpus.files:
                raise InvalidArgument(
                    f"{where}: the corpus {corpus.id} referenced in parallel corpus {pc.id} does not have "
                    "any files associated with it; add files to that corpus or leave the parallel corpus out"
                )


def chosen_corpora(
    catalog: list[ParallelSource],
    train_on: list[TrainingEntry] | None,
    pretranslate: list[PretranslateEntry] | None,
) -> list[ParallelSource]:
    """The corpora of `catalog` the (resolved) entries name, each side's corpora carrying the texts
    to train on and to pretranslate; `train_on` None: all of every corpus."""
    if train_on is None:
        train_on = [
            TrainingEntry(parallel_corpus_id=pc.id)
            if pc.kind == PARALLEL_CORPUS
            else TrainingEntry(corpus_id=pc.id)
            for pc in catalog
        ]

    def key(entry: TrainingEntry | PretranslateEntry) -> tuple[str, str | None]:
        return (
            (PARALLEL_CORPUS, entry.parallel_corpus_id)
            if entry.parallel_corpus_id is not None
            else (ENGINE_CORPUS, entry.corpus_id)
        )

    train = {key(e): (i, e) for i, e in enumerate(train_on)}
    pre = {key(e): (i, e) for i, e in enumerate(pretranslate or ())}
    result = []
    for pc in catalog:
        t = train.get((pc.kind, pc.id))
        p = pre.get((pc.kind, pc.id))
        if t is None and p is None:
            continue
        src_ids = [c.id for c in pc.source]
        trg_ids = [c.id for c in pc.target]
        src_train = entry_filters("trainOn", t, "sourceFilters", src_ids)
        trg_train = entry_filters("trainOn", t, "targetFilters", trg_ids)
        src_pre = entry_filters("pretranslate", p, "sourceFilters", src_ids)
        result.append(
            replace(
                pc,
                source=tuple(
                    replace(c, train=src_train.get(c.id), pretranslate=src_pre.get(c.id)) for c in pc.source
                ),
                target=tuple(replace(c, train=trg_train.get(c.id), pretranslate=None) for c in pc.target),
            )
        )
    return result


def entry_filters(
    field_name: str,
    indexed: tuple[int, TrainingEntry | PretranslateEntry | WordAlignEntry] | None,
    side: str,
    corpus_ids: list[str],
) -> dict[str, TextFilter | None]:
    """Each corpus of one side: the texts the entry chooses of it (None: it takes no part)."""
    if indexed is None:
        return {}
    i, entry = indexed
    where = f"{field_name}[{i}]"
    default = _texts(where, entry.text_ids, entry.scripture_range)
    return _side_filters(f"{where}.{side}", corpus_ids, entry.side_filters().get(side), default)


def _texts(where: str, text_ids: Sequence[str] | None, scripture_range: str | None) -> TextFilter:
    if text_ids is None and scripture_range is None:
        return ALL_TEXTS
    by_range = (
        parse_scripture_range(scripture_range, f"{where}.scriptureRange") if scripture_range else TextFilter()
    )
    return TextFilter(text_ids=frozenset(text_ids or ()), chapters=by_range.chapters)


def _side_filters(
    where: str, corpus_ids: list[str], filters: Sequence[CorpusFilter] | None, default: TextFilter
) -> dict[str, TextFilter | None]:
    if filters is None:
        return dict.fromkeys(corpus_ids, default)
    chosen: dict[str, TextFilter | None] = dict.fromkeys(corpus_ids)
    for i, item in enumerate(filters):
        if item.corpus_id not in chosen:
            raise InvalidArgument(
                f"{where}[{i}].corpusId: {limits.shown(item.corpus_id)} is not a corpus of this parallel corpus"
            )
        chosen[item.corpus_id] = _texts(f"{where}[{i}]", item.text_ids, item.scripture_range)
    return chosen
