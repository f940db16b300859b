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

Its parts: which corpora and texts a build reads is `build_catalog.py`'s; the corpora's
descriptions and the reading of their Text and Paratext files into segments, keyed by
(textId, ref), `corpus_files.py`'s; pairing the segments into the `ExportPlan`
`build_segments.py`'s. Several corpora on one side merge, the first non-empty segment winning; a
pair needs a non-empty segment on both sides. The engine's train-segment pairs follow the
corpora's (a build may train on them alone) unless `trainOn` is empty, an inference-only build;
so is a build whose corpora hold no pairs. A pretranslate row is a source segment not in the
training data (no target segment to train on under its key), as Serval decides it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace

from serval_api.auth import Caller
from serval_api.db.models import TRANSLATION_TYPES, EngineType
from serval_api.service import build_catalog, build_corpora, build_segments, train_segments
from serval_api.service.build_corpora import PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.build_segments import ExportPlan
from serval_api.service.context import Services
from serval_api.service.corpus_files import ENGINE_CORPUS, PARALLEL_CORPUS, ParallelSource
from serval_api.service.engines import owned_engine
from serval_api.service.file_contents import ContentsReader, Downloads
from serval_api.service.verse_counts import filtered_by_chapter
from serval_common.jobs import WORD_ALIGN_INPUT

log = logging.getLogger(__name__)


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
    stored = catalog is None
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, types=types)
        if catalog is None:
            catalog = await build_catalog.stored_catalog(s, engine_id)
        else:
            catalog = [await build_catalog.owned_locations(s, caller, pc) for pc in catalog]
        known = {
            "parallel_corpus_ids": [pc.id for pc in catalog if pc.kind == PARALLEL_CORPUS],
            "engine_corpus_ids": [pc.id for pc in catalog if pc.kind == ENGINE_CORPUS],
        }
        ignored = [
            *build_corpora.ignored_filters("trainOn", train_on, engine_corpus_ids=known["engine_corpus_ids"]),
            *build_corpora.ignored_filters(
                "pretranslate", pretranslate, engine_corpus_ids=known["engine_corpus_ids"]
            ),
        ]
        train_on = build_corpora.resolve("trainOn", train_on, **known)
        pretranslate = build_corpora.resolve("pretranslate", pretranslate, **known)
        if stored:
            build_catalog.check_named_corpora(catalog, "trainOn", train_on)
            build_catalog.check_named_corpora(catalog, "pretranslate", pretranslate)
        segments = (
            await train_segments.training_pairs(s, engine_id)
            if train_on != []
            else train_segments.TrainingPairs([], None)
        )
    corpora = build_catalog.chosen_corpora(catalog, train_on, pretranslate)
    store = ContentsReader(services, services.store)
    # The default executor: the reader's store reads go to the store's own threads (ContentsReader).
    plan = await asyncio.to_thread(build_segments.plan_segments, store, corpora, engine, segments.pairs)
    plan = replace(
        plan,
        train_on=train_on,
        pretranslate=pretranslate,
        train_segments_through=segments.through,
        warnings=[*plan.warnings, *(note.message for note in ignored)],
        diagnostics=[*plan.diagnostics, *ignored],
    )
    if EngineType(engine.type).is_word_alignment:
        plan = await plan_word_align(store, plan, catalog, word_align_on, check_corpora=stored)
    return plan


async def plan_word_align(
    store: Downloads,
    plan: ExportPlan,
    catalog: list[ParallelSource],
    word_align_on: list[WordAlignEntry] | None,
    *,
    check_corpora: bool = False,
) -> ExportPlan:
    """`plan` with the sentence pairs to align: those of the `word_align_on` entries (None: every
    parallel corpus of `catalog`, as Serval does; empty: none). The plan keeps `word_align_on` as
    resolved, None staying None as an omitted `trainOn` does. `check_corpora` (the stored catalog):
    refuse entries naming a parallel corpus with no corpora, as Serval does."""
    known = [pc.id for pc in catalog if pc.kind == PARALLEL_CORPUS]
    resolved = build_corpora.resolve(
        "wordAlignOn", word_align_on, parallel_corpus_ids=known, engine_corpus_ids=()
    )
    if check_corpora:
        build_catalog.check_named_corpora(catalog, "wordAlignOn", resolved)
    entries = [WordAlignEntry(parallel_corpus_id=pc_id) for pc_id in known] if resolved is None else resolved
    rows, chosen = await asyncio.to_thread(build_segments.word_align_rows, store, catalog, entries)
    return replace(
        plan,
        word_align_rows=rows,
        word_align_on=resolved,
        inference_filtered_by_chapter=filtered_by_chapter(chosen),
    )


async def write_build_files(services: Services, build_id: str, plan: ExportPlan) -> None:
    store = services.store
    prefix = f"builds/{build_id}"
    if plan.train:
        source = "".join(f"{src}\n" for src, _ in plan.pairs).encode()
        target = "".join(f"{trg}\n" for _, trg in plan.pairs).encode()
        await services.store_call(store.write_bytes, f"{prefix}/train.src.txt", source)
        await services.store_call(store.write_bytes, f"{prefix}/train.trg.txt", target)
    if plan.pretranslate_rows:
        rows = json.dumps(plan.pretranslate_rows, ensure_ascii=False).encode()
        await services.store_call(store.write_bytes, f"{prefix}/pretranslate.src.json", rows)
    if plan.target_texts:
        texts = json.dumps(plan.target_texts, ensure_ascii=False).encode()
        await services.store_call(store.write_bytes, f"{prefix}/target-texts.json", texts)
    if plan.word_align_rows is not None:
        pairs = json.dumps(plan.word_align_rows, ensure_ascii=False).encode()
        await services.store_call(store.write_bytes, f"{prefix}/{WORD_ALIGN_INPUT}", pairs)
    log.info(
        "build files written",
        extra={
            "build_id": build_id,
            "train_count": len(plan.pairs),
            "pretranslate_count": len(plan.pretranslate_rows),
        },
    )
