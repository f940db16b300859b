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

The corpora's descriptions and the reading of their Text and Paratext files into segments,
keyed by (textId, ref), are `corpus_files.py`'s. Several corpora on one side merge, the first
non-empty segment winning; a pair needs a non-empty segment on both sides. The engine's train-segment pairs follow the
corpora's (a build may train on them alone) unless `trainOn` is empty, an inference-only build;
so is a build whose corpora hold no pairs. A pretranslate row is a source segment not in the
training data (no target segment to train on under its key), as Serval decides it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import Caller
from serval_api.db.models import Corpus, DataFile, Engine, EngineType
from serval_api.errors import InvalidArgument
from serval_api.service import build_corpora, corpus_files, diagnostics, limits, train_segments
from serval_api.service.build_corpora import CorpusFilter, PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.context import Services
from serval_api.service.corpus_files import (
    ENGINE_CORPUS,
    PARALLEL_CORPUS,
    CorpusFileSource,
    MonolingualSource,
    ParallelSource,
    TextFilter,
)
from serval_api.service.diagnostics import Diagnostic
from serval_api.service.engine_corpora import engine_corpora_of
from serval_api.service.engines import TRANSLATION_TYPES, owned_engine
from serval_api.service.file_contents import ContentsReader, Downloads, contents_key
from serval_api.service.files import FileFormat
from serval_api.service.parallel_corpora import engine_parallel_corpora
from serval_api.service.verse_counts import VerseCount, filtered_by_chapter, verse_count
from serval_common.families import family
from serval_common.jobs import WORD_ALIGN_INPUT
from serval_common.languages import NLLB_LANGUAGE_CODE_SET, resolve_language

log = logging.getLogger(__name__)

NO_PAIRS = (
    "the corpora to train on hold no parallel segments: the build trains nothing and uses the base "
    "model; give the target corpora text for the source's segments to train"
)
"""A warning, not a refusal: Serval builds with nothing to train on (its preprocess job writes
empty training files) and pretranslates with the base model."""

_RANGE_PART = re.compile(r"^([A-Z0-9]{3})(?:(\d+)(?:-(\d+))?)?$")


ALL_TEXTS = TextFilter(everything=True)


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
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """The warnings as Serval 1.20's diagnostics (`service/diagnostics.py`)."""
    train_verse_count: VerseCount = field(default_factory=dict)
    """The verses of Scripture among the corpora's training pairs (by their target refs)."""
    train_filtered_by_chapter: bool = False
    inference_filtered_by_chapter: bool = False
    """Whether `pretranslate` (or a word-alignment build's `wordAlignOn`) chose chapters."""

    def execution_data(self, engine: Engine, model_name: str | None = None) -> dict[str, Any]:
        """What the build's execution data starts as; `model_name`: the base model an `nmt` build
        starts from, whose languages Serval's `MODEL-` diagnostics are about."""
        shared = {
            "trainCount": len(self.pairs),
            "isTrainFilteredByChapter": self.train_filtered_by_chapter,
            "trainVerseCount": self.train_verse_count,
            "warnings": self.warnings,
            "engineSourceLanguageTag": engine.source_language,
            "engineTargetLanguageTag": engine.target_language,
        }
        if self.word_align_rows is not None:
            return {
                **shared,
                "wordAlignCount": len(self.word_align_rows),
                "isWordAlignFilteredByChapter": self.inference_filtered_by_chapter,
                "wordAlignVerseCount": verse_count(r["targetRefs"] for r in self.word_align_rows),
                **diagnostics.merged(None, self.diagnostics),
            }
        model_checks = (
            _model_diagnostics(engine, len(self.pairs), model_name)
            if family(engine.type).takes_base_model and model_name is not None
            else []
        )
        return {
            **shared,
            "trainSegmentCount": self.train_segment_count,
            "pretranslateCount": len(self.pretranslate_rows),
            "isPretranslateFilteredByChapter": self.inference_filtered_by_chapter,
            "pretranslateVerseCount": verse_count(r["targetRefs"] for r in self.pretranslate_rows),
            **diagnostics.merged(None, [*self.diagnostics, *model_checks]),
        }


def _model_diagnostics(engine: Engine, train_count: int, model_name: str) -> list[Diagnostic]:
    """Serval's checks of an NMT build (`NmtPreprocessBuildJob.GetDiagnostics`): few segments to
    train on, and languages the base model (NLLB-200) does not know."""
    found = []
    if 0 < train_count < diagnostics.MINIMUM_TRAIN_COUNT:
        found.append(diagnostics.few_training_segments(train_count))
    unknown = []
    for side, code, tag in (
        ("source", engine.source_code, engine.source_language),
        ("target", engine.target_code, engine.target_language),
    ):
        if code not in NLLB_LANGUAGE_CODE_SET:
            found.append(diagnostics.unknown_script(side, code, model_name))
            unknown.append(tag)
    if train_count == 0 and unknown:
        found.append(diagnostics.unknown_languages_untrained(unknown, model_name))
    return found


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
    store = ContentsReader(services, services.store)
    plan = await asyncio.to_thread(_collect, store, corpora, engine, segments.pairs)
    plan = replace(
        plan, train_on=train_on, pretranslate=pretranslate, train_segments_through=segments.through
    )
    if EngineType(engine.type).is_word_alignment:
        plan = await plan_word_align(store, plan, catalog, word_align_on)
    return plan


async def plan_word_align(
    store: Downloads,
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
    rows, chosen = await asyncio.to_thread(_word_align_rows, store, catalog, entries)
    return replace(
        plan,
        word_align_rows=rows,
        word_align_on=resolved,
        inference_filtered_by_chapter=filtered_by_chapter(chosen),
    )


def _chosen_texts(chosen: dict[str, TextFilter | None], corpus: MonolingualSource) -> TextFilter | None:
    return chosen.get(corpus.id)


def _word_align_rows(
    store: Downloads, catalog: list[ParallelSource], entries: list[WordAlignEntry]
) -> tuple[list[dict[str, Any]], list[TextFilter | None]]:
    """Blocking: per entry, the pairs of its chosen texts with a non-empty segment on both sides;
    and the texts each entry chose of each corpus."""
    by_id = {pc.id: pc for pc in catalog if pc.kind == PARALLEL_CORPUS}
    rows: list[dict[str, Any]] = []
    every_choice: list[TextFilter | None] = []
    with tempfile.TemporaryDirectory(prefix="serval-export-") as tmp:
        reader = corpus_files.FileReader(store, Path(tmp))
        for i, entry in enumerate(entries):
            pc = by_id[entry.parallel_corpus_id or ""]
            indexed = (i, entry)
            sides = {}
            for side, corpora in (("sourceFilters", pc.source), ("targetFilters", pc.target)):
                chosen = _entry_filters("wordAlignOn", indexed, side, [c.id for c in corpora])
                every_choice.extend(chosen.values())
                sides[side] = corpus_files.segments(reader, corpora, partial(_chosen_texts, chosen))
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
    return rows, every_choice


async def write_build_files(services: Services, build_id: str, plan: ExportPlan) -> None:
    store = services.store
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
            match = corpus_files.FILE_LOCATION.match(file.location)
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
    store: Downloads,
    corpora: list[ParallelSource],
    engine: Engine,
    segment_pairs: list[tuple[str, str]],
) -> ExportPlan:
    """Blocking: read every file once and pair the segments; the engine's train-segment pairs
    follow the corpora's. As Serval's `ParallelCorpusService.PreprocessAsync`, a source segment of a
    `pretranslate` corpus is exported unless its key (text id, ref) has a non-empty target segment
    among the texts chosen to train on, of any corpus the build names: a corpus only pretranslated
    is pretranslated whole, existing target text or not. Nothing to train on is no error (Serval
    trains nothing and pretranslates with the base model): the plan is then inference-only."""
    warnings: list[str] = []
    found: list[Diagnostic] = []
    pairs: list[tuple[str, str]] = []
    train_refs: list[list[str]] = []
    rows: list[dict[str, Any]] = []
    target_texts: list[dict[str, Any]] = []
    trained_targets: set[tuple[str, str]] = set()
    train_requested = False
    with tempfile.TemporaryDirectory(prefix="serval-export-") as tmp:
        reader = corpus_files.FileReader(store, Path(tmp))
        for pc in corpora:
            _check_languages(pc, engine, warnings, found)
            train_requested |= any(c.train is not None for c in pc.source) and any(
                c.train is not None for c in pc.target
            )
            target_texts.append(_target_text(reader, pc))
            source_train = corpus_files.segments(reader, pc.source, lambda c: c.train)
            target_train = corpus_files.segments(reader, pc.target, lambda c: c.train)
            trained_targets |= target_train.keys()
            paired = [(row, target_train[key]) for key, row in source_train.items() if key in target_train]
            pairs.extend((_one_line(row.text), _one_line(target.text)) for row, target in paired)
            train_refs.extend([target.ref] for _, target in paired)
        for pc in corpora:
            rows.extend(
                {
                    "corpusId": pc.id,
                    "textId": row.text_id,
                    "sourceRefs": [row.ref],
                    "targetRefs": [row.ref],
                    "translation": row.text,
                }
                for key, row in corpus_files.segments(reader, pc.source, lambda c: c.pretranslate).items()
                if key not in trained_targets
            )
    pairs.extend(segment_pairs)
    if train_requested and not pairs:
        warnings.append(NO_PAIRS)
        found.append(diagnostics.nothing_to_train(NO_PAIRS))
    return ExportPlan(
        train=bool(pairs),
        pairs=pairs,
        pretranslate_rows=rows,
        warnings=warnings,
        train_segment_count=len(segment_pairs),
        target_texts=target_texts,
        diagnostics=found,
        train_verse_count=verse_count(train_refs),
        train_filtered_by_chapter=filtered_by_chapter(
            c.train for pc in corpora for c in (*pc.source, *pc.target)
        ),
        inference_filtered_by_chapter=filtered_by_chapter(
            c.pretranslate for pc in corpora for c in pc.source
        ),
    )


def _target_text(reader: corpus_files.FileReader, pc: ParallelSource) -> dict[str, Any]:
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


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_languages(
    pc: ParallelSource, engine: Engine, warnings: list[str], found: list[Diagnostic]
) -> None:
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
                warning = (
                    f"{pc.kind} {pc.id}: {what} is in {corpus.language!r}, "
                    f"the engine's {side} language is {engine_tag!r}"
                )
                warnings.append(warning)
                found.append(
                    diagnostics.corpus_language(
                        warning, corpus_ref=pc.id, side=side, corpus_id=corpus.id, language=corpus.language
                    )
                )
