"""The segments a build uses, paired from its chosen corpora: its `ExportPlan`.

`plan_segments` reads the corpora `build_catalog.chosen_corpora` chose (through `corpus_files`'
`FileReader`) and pairs their segments, keyed by (textId, ref): a source segment with the target
segment of the same key makes a training pair, and a source segment of a `pretranslate` corpus
with no target to train on under its key a pretranslate row; `word_align_rows` pairs a
word-alignment build's `wordAlignOn` corpora. The plan also says what the build's execution data
starts as (`ExportPlan.execution_data`: counts, verse counts, warnings and diagnostics). Both
functions block (they download and parse files); the build export (`corpus_export.py`) runs them
in a thread and writes the plan's files.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from serval_api.db.models import EngineRow
from serval_api.db.models.build_record import Diagnostic, ExecutionData, VerseCount
from serval_api.service import corpus_files, diagnostics
from serval_api.service.build_catalog import entry_filters
from serval_api.service.build_corpora import PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.corpus_files import PARALLEL_CORPUS, MonolingualSource, ParallelSource, TextFilter
from serval_api.service.file_contents import Downloads
from serval_api.service.verse_counts import filtered_by_chapter, verse_count
from serval_common.families import family
from serval_common.languages import NLLB_LANGUAGE_CODE_SET, resolve_language

NO_PAIRS = (
    "the corpora to train on hold no parallel segments: the build trains nothing and uses the base "
    "model; give the target corpora text for the source's segments to train"
)
"""A warning, not a refusal: Serval builds with nothing to train on (its preprocess job writes
empty training files) and pretranslates with the base model."""


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
    """The highest `TrainSegmentRow.id` among the train-segment pairs the build trains on (None: none)."""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """The warnings as Serval 1.20's diagnostics (`service/diagnostics.py`)."""
    train_verse_count: VerseCount = field(default_factory=dict)
    """The verses of Scripture among the corpora's training pairs (by their target refs)."""
    train_filtered_by_chapter: bool = False
    inference_filtered_by_chapter: bool = False
    """Whether `pretranslate` (or a word-alignment build's `wordAlignOn`) chose chapters."""

    def execution_data(self, engine: EngineRow, model_name: str | None = None) -> ExecutionData:
        """What the build's execution data starts as; `model_name`: the base model an `nmt` build
        starts from, whose languages Serval's `MODEL-` diagnostics are about."""
        shared: dict[str, Any] = {
            "train_count": len(self.pairs),
            "is_train_filtered_by_chapter": self.train_filtered_by_chapter,
            "train_verse_count": self.train_verse_count,
            "warnings": self.warnings,
            "engine_source_language_tag": engine.source_language,
            "engine_target_language_tag": engine.target_language,
        }
        if self.word_align_rows is not None:
            aligned = ExecutionData(
                **shared,
                word_align_count=len(self.word_align_rows),
                is_word_align_filtered_by_chapter=self.inference_filtered_by_chapter,
                word_align_verse_count=verse_count(r["targetRefs"] for r in self.word_align_rows),
            )
            return diagnostics.merged(aligned, self.diagnostics)
        model_checks = (
            _model_diagnostics(engine, len(self.pairs), model_name)
            if family(engine.type).takes_base_model and model_name is not None
            else []
        )
        translated = ExecutionData(
            **shared,
            train_segment_count=self.train_segment_count,
            pretranslate_count=len(self.pretranslate_rows),
            is_pretranslate_filtered_by_chapter=self.inference_filtered_by_chapter,
            pretranslate_verse_count=verse_count(r["targetRefs"] for r in self.pretranslate_rows),
        )
        return diagnostics.merged(translated, [*self.diagnostics, *model_checks])


def _model_diagnostics(engine: EngineRow, train_count: int, model_name: str) -> list[Diagnostic]:
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


def plan_segments(
    store: Downloads,
    corpora: list[ParallelSource],
    engine: EngineRow,
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
            target_texts.append(corpus_files.target_text(reader, pc))
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


def word_align_rows(
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
                chosen = entry_filters("wordAlignOn", indexed, side, [c.id for c in corpora])
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


def _chosen_texts(chosen: dict[str, TextFilter | None], corpus: MonolingualSource) -> TextFilter | None:
    return chosen.get(corpus.id)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_languages(
    pc: ParallelSource, engine: EngineRow, warnings: list[str], found: list[Diagnostic]
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
