"""The build export: turn an engine's parallel corpora and engine corpora into the files a build
job reads.

`plan_build` reads the corpora (from the database for REST builds, from the request for gRPC's
`StartBuild`) and pairs their segments, an engine corpus its source files with its target files
as a parallel corpus its source corpora with its target corpora; `write_build_files` puts the
result in the model store: `builds/{buildId}/train.src.txt` and `train.trg.txt` (one segment a
line, paired by line) and `builds/{buildId}/pretranslate.src.json`, whose rows carry the id of
the parallel corpus or engine corpus they came from as `corpusId`. A word-alignment engine's build
writes `builds/{buildId}/word-align.json` (`WORD_ALIGN_INPUT`) instead of pretranslations: the
sentence pairs of its `wordAlignOn` corpora (omitted: all its parallel corpora) to align.

Segments are keyed by (textId, ref). A Text file's ref is `{textId}:{lineNumber}` (1-based);
a Paratext zip's text ids are book ids and its refs verse references (`MAT 1:1`), read with
SIL's `sil-machine`. Several corpora on one side merge, the first non-empty segment winning;
a pair needs a non-empty segment on both sides. The engine's train-segment pairs follow the
corpora's (a build may train on them alone) unless `trainOn` is empty, an inference-only build.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import Caller
from serval_api.db.models import Corpus, DataFile, Engine, EngineType
from serval_api.errors import InvalidArgument, concealed
from serval_api.service import build_corpora, limits, train_segments
from serval_api.service.build_corpora import CorpusFilter, PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.context import Services
from serval_api.service.engine_corpora import engine_corpora_of
from serval_api.service.engines import TRANSLATION_TYPES, owned_engine
from serval_api.service.files import FileFormat, contents_key, model_store
from serval_api.service.parallel_corpora import engine_parallel_corpora
from serval_common.jobs import WORD_ALIGN_INPUT
from serval_common.languages import resolve_language
from serval_common.store import ModelStore, StoreError

log = logging.getLogger(__name__)

NO_PAIRS = "no parallel segments to train on"

PARALLEL_CORPUS = "parallel corpus"
ENGINE_CORPUS = "corpus"
"""`ParallelSource.kind` of an engine corpus: one source and one target side, both its own id."""

_FILE_LOCATION = re.compile(r"^files/([^/]+)(?:/contents)?$")
_RANGE_PART = re.compile(r"^([A-Z0-9]{3})(?:(\d+)(?:-(\d+))?)?$")


@dataclass(frozen=True)
class TextFilter:
    """Which texts (and, for Scripture, which chapters of a book) to use; `everything` uses all."""

    everything: bool = False
    text_ids: frozenset[str] = frozenset()
    chapters: dict[str, frozenset[int]] = field(default_factory=dict)

    def admits(self, text_id: str, chapter: int | None) -> bool:
        if self.everything or text_id in self.text_ids:
            return True
        if text_id not in self.chapters:
            return False
        wanted = self.chapters[text_id]
        return not wanted or chapter is None or chapter in wanted


ALL_TEXTS = TextFilter(everything=True)


@dataclass(frozen=True)
class CorpusFileSource:
    location: str
    format: FileFormat
    text_id: str


@dataclass(frozen=True)
class MonolingualSource:
    """`train` / `pretranslate`: the texts chosen for that; None: the corpus takes no part in it."""

    id: str
    language: str
    files: tuple[CorpusFileSource, ...]
    train: TextFilter | None = None
    pretranslate: TextFilter | None = None


@dataclass(frozen=True)
class ParallelSource:
    """`id` becomes the `corpusId` of its pretranslations; `kind` (PARALLEL_CORPUS or ENGINE_CORPUS)
    says which entries name it, and names it in warnings."""

    id: str
    source: tuple[MonolingualSource, ...]
    target: tuple[MonolingualSource, ...]
    kind: str = PARALLEL_CORPUS


@dataclass
class ExportPlan:
    train: bool
    pairs: list[tuple[str, str]]
    pretranslate_rows: list[dict[str, Any]]
    warnings: list[str]
    train_segment_count: int = 0
    target_texts: list[dict[str, Any]] = field(default_factory=list)
    """Per corpus, its whole target side for quotation-mark detection (`build_jobs.quotes`)."""
    train_on: list[TrainingEntry] | None = None
    pretranslate: list[PretranslateEntry] | None = None
    word_align_rows: list[dict[str, Any]] | None = None
    """A word-alignment build's pairs to align (`WORD_ALIGN_INPUT`); None for a translation build."""
    word_align_on: list[WordAlignEntry] | None = None
    train_segments_through: int | None = None
    """The highest `TrainSegment.id` among the train-segment pairs the build trains on (None: none)."""

    def execution_data(self, engine: Engine) -> dict[str, Any]:
        if self.word_align_rows is not None:
            return {
                "trainCount": len(self.pairs),
                "wordAlignCount": len(self.word_align_rows),
                "warnings": self.warnings,
                "engineSourceLanguageTag": engine.source_language,
                "engineTargetLanguageTag": engine.target_language,
            }
        return {
            "trainCount": len(self.pairs),
            "trainSegmentCount": self.train_segment_count,
            "pretranslateCount": len(self.pretranslate_rows),
            "warnings": self.warnings,
            "engineSourceLanguageTag": engine.source_language,
            "engineTargetLanguageTag": engine.target_language,
        }


@dataclass(frozen=True)
class _Row:
    text_id: str
    ref: str
    chapter: int | None
    text: str


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


async def plan_build(
    services: Services,
    caller: Caller,
    engine_id: str,
    *,
    train_on: list[TrainingEntry] | None,
    pretranslate: list[PretranslateEntry] | None,
    catalog: list[ParallelSource] | None = None,
    word_align_on: list[WordAlignEntry] | None = None,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> ExportPlan:
    """`train_on` / `pretranslate` name corpora of the engine's stored ones, or of `catalog`: the
    corpora a gRPC `StartBuild` carries, which then stand in for the stored ones. The plan carries
    both resolved (`build_corpora.resolve`). A word-alignment engine's plan has `word_align_rows`
    (`plan_word_align`)."""
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, types=types)
        if catalog is None:
            catalog = await _stored_catalog(s, engine_id)
        else:
            catalog = [await _owned_locations(s, caller, pc) for pc in catalog]
        known = {
            "parallel_corpus_ids": [pc.id for pc in catalog if pc.kind == PARALLEL_CORPUS],
            "engine_corpus_ids": [pc.id for pc in catalog if pc.kind == ENGINE_CORPUS],
        }
        train_on = build_corpora.resolve("trainOn", train_on, **known)
        pretranslate = build_corpora.resolve("pretranslate", pretranslate, **known)
        segments = (
            await train_segments.training_pairs(s, engine_id)
            if train_on != []
            else train_segments.TrainingPairs([], None)
        )
    corpora = _chosen(catalog, train_on, pretranslate)
    store = model_store(services.settings)
    plan = await asyncio.to_thread(_collect, store, corpora, engine, segments.pairs)
    plan = replace(
        plan, train_on=train_on, pretranslate=pretranslate, train_segments_through=segments.through
    )
    if EngineType(engine.type).is_word_alignment:
        plan = await plan_word_align(store, plan, catalog, word_align_on)
    return plan


async def plan_word_align(
    store: ModelStore,
    plan: ExportPlan,
    catalog: list[ParallelSource],
    word_align_on: list[WordAlignEntry] | None,
) -> ExportPlan:
    """`plan` with the sentence pairs to align: those of the `word_align_on` entries (None: every
    parallel corpus of `catalog`, as Serval does; empty: none). The plan keeps `word_align_on` as
    resolved, None staying None as an omitted `trainOn` does."""
    known = [pc.id for pc in catalog if pc.kind == PARALLEL_CORPUS]
    resolved = build_corpora.resolve(
        "wordAlignOn", word_align_on, parallel_corpus_ids=known, engine_corpus_ids=()
    )
    entries = [WordAlignEntry(parallel_corpus_id=pc_id) for pc_id in known] if resolved is None else resolved
    rows = await asyncio.to_thread(_word_align_rows, store, catalog, entries)
    return replace(plan, word_align_rows=rows, word_align_on=resolved)


def _chosen_texts(chosen: dict[str, TextFilter | None], corpus: MonolingualSource) -> TextFilter | None:
    return chosen.get(corpus.id)


def _word_align_rows(
    store: ModelStore, catalog: list[ParallelSource], entries: list[WordAlignEntry]
) -> list[dict[str, Any]]:
    """Blocking: per entry, the pairs of its chosen texts with a non-empty segment on both sides."""
    by_id = {pc.id: pc for pc in catalog if pc.kind == PARALLEL_CORPUS}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="serval-export-") as tmp:
        reader = _FileReader(store, Path(tmp))
        for i, entry in enumerate(entries):
            pc = by_id[entry.parallel_corpus_id or ""]
            indexed = (i, entry)
            sides = {}
            for side, corpora in (("sourceFilters", pc.source), ("targetFilters", pc.target)):
                chosen = _entry_filters("wordAlignOn", indexed, side, [c.id for c in corpora])
                sides[side] = _segments(reader, corpora, partial(_chosen_texts, chosen))
            target = sides["targetFilters"]
            rows.extend(
                {
                    "corpusId": pc.id,
                    "textId": row.text_id,
                    "sourceRefs": [row.ref],
                    "targetRefs": [key[1]],
                    "source": _one_line(row.text),
                    "target": _one_line(target[key].text),
                }
                for key, row in sides["sourceFilters"].items()
                if key in target
            )
    return rows


async def write_build_files(services: Services, build_id: str, plan: ExportPlan) -> None:
    store = model_store(services.settings)
    prefix = f"builds/{build_id}"
    if plan.train:
        source = "".join(f"{src}\n" for src, _ in plan.pairs).encode()
        target = "".join(f"{trg}\n" for _, trg in plan.pairs).encode()
        await asyncio.to_thread(store.write_bytes, f"{prefix}/train.src.txt", source)
        await asyncio.to_thread(store.write_bytes, f"{prefix}/train.trg.txt", target)
    if plan.pretranslate_rows:
        rows = json.dumps(plan.pretranslate_rows, ensure_ascii=False).encode()
        await asyncio.to_thread(store.write_bytes, f"{prefix}/pretranslate.src.json", rows)
    if plan.target_texts:
        texts = json.dumps(plan.target_texts, ensure_ascii=False).encode()
        await asyncio.to_thread(store.write_bytes, f"{prefix}/target-texts.json", texts)
    if plan.word_align_rows is not None:
        pairs = json.dumps(plan.word_align_rows, ensure_ascii=False).encode()
        await asyncio.to_thread(store.write_bytes, f"{prefix}/{WORD_ALIGN_INPUT}", pairs)
    log.info(
        "build files written",
        extra={
            "build_id": build_id,
            "train_count": len(plan.pairs),
            "pretranslate_count": len(plan.pretranslate_rows),
        },
    )


async def _owned_locations(s: AsyncSession, caller: Caller, pc: ParallelSource) -> ParallelSource:
    """A gRPC corpus file's `location` must name one of the caller's data files (`files/{id}` or
    `files/{id}/contents`): other store keys and local paths would read other owners' data."""

    async def owned(corpus: MonolingualSource) -> MonolingualSource:
        files = []
        for file in corpus.files:
            match = _FILE_LOCATION.match(file.location)
            record = await s.get(DataFile, match.group(1)) if match else None
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


async def _stored_catalog(s: AsyncSession, engine_id: str) -> list[ParallelSource]:
    """The engine's parallel corpora, then its engine corpora, with their files; no texts chosen."""
    stored = await engine_parallel_corpora(s, engine_id)
    engine_corpora = await engine_corpora_of(s, engine_id)
    corpus_ids = {c for pc in stored for c in (*pc.source_corpus_ids, *pc.target_corpus_ids)}
    corpora = {c: await s.get(Corpus, c) for c in corpus_ids}
    file_ids = {f["fileId"] for corpus in corpora.values() if corpus for f in corpus.files}
    file_ids |= {f["fileId"] for ec in engine_corpora for f in (*ec.source_files, *ec.target_files)}
    files = {f: await s.get(DataFile, f) for f in file_ids}

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


def _chosen(
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
        src_train = _entry_filters("trainOn", t, "sourceFilters", src_ids)
        trg_train = _entry_filters("trainOn", t, "targetFilters", trg_ids)
        src_pre = _entry_filters("pretranslate", p, "sourceFilters", src_ids)
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


def _entry_filters(
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


def _collect(
    store: ModelStore,
    corpora: list[ParallelSource],
    engine: Engine,
    segment_pairs: list[tuple[str, str]],
) -> ExportPlan:
    """Blocking: read every file once and pair the segments; the engine's train-segment pairs
    follow the corpora's."""
    warnings: list[str] = []
    pairs: list[tuple[str, str]] = []
    rows: list[dict[str, Any]] = []
    target_texts: list[dict[str, Any]] = []
    train_requested = False
    with tempfile.TemporaryDirectory(prefix="serval-export-") as tmp:
        reader = _FileReader(store, Path(tmp))
        for pc in corpora:
            _check_languages(pc, engine, warnings)
            train_requested |= any(c.train is not None for c in pc.source) and any(
                c.train is not None for c in pc.target
            )
            target_all = _segments(reader, pc.target, lambda c: ALL_TEXTS)
            target_texts.append(_target_text(reader, pc))
            source_train = _segments(reader, pc.source, lambda c: c.train)
            target_train = _segments(reader, pc.target, lambda c: c.train)
            pairs.extend(
                (_one_line(row.text), _one_line(target_train[key].text))
                for key, row in source_train.items()
                if key in target_train
            )
            for key, row in _segments(reader, pc.source, lambda c: c.pretranslate).items():
                if key in target_all:
                    continue
                rows.append(
                    {
                        "corpusId": pc.id,
                        "textId": row.text_id,
                        "sourceRefs": [row.ref],
                        "targetRefs": [row.ref],
                        "translation": row.text,
                    }
                )
    pairs.extend(segment_pairs)
    if train_requested and not pairs:
        raise InvalidArgument(NO_PAIRS)
    return ExportPlan(
        train=train_requested or bool(segment_pairs),
        pairs=pairs,
        pretranslate_rows=rows,
        warnings=warnings,
        train_segment_count=len(segment_pairs),
        target_texts=target_texts,
    )


def _target_text(reader: _FileReader, pc: ParallelSource) -> dict[str, Any]:
    """Paratext books as USFM, since sil-machine's quote convention detector reads USFM; Text
    files as their lines."""
    books: list[dict[str, str]] = []
    texts: list[dict[str, Any]] = []
    for corpus in pc.target:
        for file in corpus.files:
            if file.format == FileFormat.PARATEXT:
                books.extend({"textId": book, "usfm": usfm} for book, usfm in reader.usfm_books(file))
            else:
                texts.append({"textId": file.text_id, "segments": [row.text for row in reader.rows(file)]})
    return {"corpusId": pc.id, "books": books, "texts": texts}


def _segments(
    reader: _FileReader,
    sides: tuple[MonolingualSource, ...],
    choose: Callable[[MonolingualSource], TextFilter | None],
) -> dict[tuple[str, str], _Row]:
    merged: dict[tuple[str, str], _Row] = {}
    for corpus in sides:
        wanted = choose(corpus)
        if wanted is None:
            continue
        for file in corpus.files:
            for row in reader.rows(file):
                if row.text.strip() and wanted.admits(row.text_id, row.chapter):
                    merged.setdefault((row.text_id, row.ref), row)
    return merged


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_languages(pc: ParallelSource, engine: Engine, warnings: list[str]) -> None:
    for side, corpora, engine_code, engine_tag in (
        ("source", pc.source, engine.source_code, engine.source_language),
        ("target", pc.target, engine.target_code, engine.target_language),
    ):
        for corpus in corpora:
            try:
                code = resolve_language(corpus.language).code
            except ValueError:
                code = ""
            if code.split("_")[0] != engine_code.split("_")[0]:
                what = f"its {side} side" if corpus.id == pc.id else f"{side} corpus {corpus.id}"
                warnings.append(
                    f"{pc.kind} {pc.id}: {what} is in {corpus.language!r}, "
                    f"the engine's {side} language is {engine_tag!r}"
                )


class _FileReader:
    """Downloads each store object once and parses it into rows."""

    def __init__(self, store: ModelStore, folder: Path) -> None:
        self._store = store
        self._folder = folder
        self._rows: dict[CorpusFileSource, list[_Row]] = {}
        self._paths: dict[str, Path] = {}

    def rows(self, file: CorpusFileSource) -> list[_Row]:
        if file not in self._rows:
            path = self._path(file)
            if file.format == FileFormat.TEXT:
                self._rows[file] = list(_text_rows(path, file.text_id))
            else:
                self._rows[file] = list(_paratext_rows(path, _file_name(file)))
        return self._rows[file]

    def usfm_books(self, file: CorpusFileSource) -> list[tuple[str, str]]:
        return _paratext_books(self._path(file), _file_name(file))

    def _path(self, file: CorpusFileSource) -> Path:
        if file.location not in self._paths:
            path = self._folder / f"{len(self._paths)}"
            try:
                self._store.download_file(file.location, path)
            except StoreError as e:
                raise concealed(
                    InvalidArgument, f"corpus file {_file_name(file)} cannot be read", e, log
                ) from None
            self._paths[file.location] = path
        return self._paths[file.location]


def _file_name(file: CorpusFileSource) -> str:
    match = _FILE_LOCATION.match(file.location)
    return match.group(1) if match else repr(file.text_id)


def _text_rows(path: Path, text_id: str) -> Iterator[_Row]:
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        for number, line in enumerate(f, start=1):
            yield _Row(text_id, f"{text_id}:{number}", None, line.rstrip("\r\n"))


def _unreadable_paratext(name: str, e: Exception) -> InvalidArgument:
    return concealed(InvalidArgument, f"Paratext file {name} could not be read as a Paratext project", e, log)


def _paratext_rows(path: Path, name: str) -> Iterator[_Row]:
    from machine.corpora import ParatextBackupTextCorpus

    try:
        corpus = ParatextBackupTextCorpus(str(path))
        for row in corpus.get_rows():
            yield _Row(row.text_id, str(row.ref), row.ref.chapter_num, row.text)
    except Exception as e:
        raise _unreadable_paratext(name, e) from None


def _paratext_books(path: Path, file_name: str) -> list[tuple[str, str]]:
    """(book id, USFM) of each book a Paratext project zip holds, in canonical order."""
    import zipfile

    from machine.corpora import ZipParatextProjectSettingsParser
    from machine.scripture.canon import get_scripture_books

    try:
        with zipfile.ZipFile(path) as archive:
            settings = ZipParatextProjectSettingsParser(archive).parse()
            names = set(archive.namelist())
            return [
                (book, archive.read(name).decode(settings.encoding, errors="replace"))
                for book in get_scripture_books()
                if (name := settings.get_book_file_name(book)) in names
            ]
    except Exception as e:
        raise _unreadable_paratext(file_name, e) from None
