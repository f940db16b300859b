"""A `statistical` engine's build: train a Thot word aligner, align every requested pair, stream
the alignments, publish the model.

Steps, with a cancel noticed between every training iteration, every chunk of aligned rows and
every uploaded file:

1. read the training pairs (`builds/{id}/train.src.txt` / `train.trg.txt`, paired by line; pairs
   with an empty side are skipped) and the pairs to align (`builds/{id}/word-align.json`,
   `WORD_ALIGN_INPUT`, written by the API service);
2. train the symmetrized aligner (`serval_common.thot_alignment`, model type and heuristic from
   `AlignmentBuildOptions`) on the training pairs followed by the pairs to align that are not
   among them: statistical alignment is transductive, and a word seen only in the text to align
   would otherwise have no translation probability. `maxSegments` caps that list;
3. align ALL rows of `word-align.json` (never a prefix of them), in chunks, and stream them over
   the word-alignment platform's InsertWordAlignments; a row that cannot be aligned (malformed,
   or Thot failing on it) is left out, counted and named in a warning;
4. publish `models/{engineId}/{revision}/` (layout in `serval_common.thot_alignment`): files
   first, manifest last, through `publish_revision`;
5. report execution data (`train_count`, `word_align_count` = rows aligned, warnings) through the
   word-alignment platform's UpdateBuildExecutionData.

The job then completes with `corpus_size` = pairs trained on and `confidence` = the direction
agreement of the trained models in percent (0–100): the share of links the independently trained
source→target and target→source models agree on over up to 500 training pairs.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from build_jobs.data import corpus_keys
from build_jobs.progress import BuildProgress
from build_jobs.publish import publish_revision
from build_jobs.report import WordAlignmentRow
from build_jobs.template import Built, FamilyBuildJob
from serval.translation.v1 import platform_pb2
from serval.word_alignment.v1 import platform_pb2 as wa_platform_pb2
from serval_common.alignment_build_options import AlignmentBuildOptions
from serval_common.jobs import WORD_ALIGN_INPUT, JobSpec
from serval_common.manifest import Manifest
from serval_common.store import ModelStore, ObjectMissing
from serval_common.thot_alignment import BACKEND, AlignmentSettings, Progress, ThotAligner, train

log = logging.getLogger(__name__)

TRAIN = (0.02, 0.8)
ALIGN = (0.8, 0.94)
ALIGN_CHUNK = 256
"""Rows aligned per Thot call; a cancel is noticed between chunks."""
MAX_WARNINGS_LISTED = 5


class AlignmentInputError(ValueError):
    """`word-align.json` is not what the API service writes; the message says what is wrong."""


@dataclass(frozen=True)
class AlignInput:
    """One row of `word-align.json`."""

    corpus_id: str
    text_id: str
    source_refs: list[str]
    target_refs: list[str]
    source: str
    target: str


@dataclass
class AlignmentBuild:
    corpus_size: int
    confidence: float
    summary: str
    aligned: int = 0
    warnings: list[str] = field(default_factory=list)


def word_align_key(build_id: str) -> str:
    return f"builds/{build_id}/{WORD_ALIGN_INPUT}"


def read_training_pairs(store: ModelStore, build_id: str) -> list[tuple[str, str]]:
    """The training pairs with text on both sides; none when the build exported no corpus."""
    source_key, target_key = corpus_keys(build_id)
    try:
        sources = store.read_bytes(source_key).decode("utf-8").splitlines()
        targets = store.read_bytes(target_key).decode("utf-8").splitlines()
    except ObjectMissing:
        return []
    if len(sources) != len(targets):
        raise AlignmentInputError(
            f"misaligned corpus: {len(sources)} source lines vs {len(targets)} target lines"
        )
    return [(s.strip(), t.strip()) for s, t in zip(sources, targets, strict=True) if s.strip() and t.strip()]


def read_align_inputs(store: ModelStore, build_id: str) -> tuple[list[AlignInput], int]:
    """The rows to align, and how many rows of the file are malformed (left out)."""
    try:
        raw = json.loads(store.read_bytes(word_align_key(build_id)).decode("utf-8"))
    except ObjectMissing:
        return [], 0
    except ValueError as exc:
        raise AlignmentInputError(f"{WORD_ALIGN_INPUT} is not valid JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise AlignmentInputError(f"{WORD_ALIGN_INPUT} must hold a JSON array of rows")
    rows: list[AlignInput] = []
    malformed = 0
    for item in raw:
        row = _align_input(item)
        if row is None:
            malformed += 1
        else:
            rows.append(row)
    return rows, malformed


def _align_input(item: Any) -> AlignInput | None:
    if not isinstance(item, dict):
        return None
    texts = [item.get(key) for key in ("corpusId", "textId", "source", "target")]
    refs = [item.get(key, []) for key in ("sourceRefs", "targetRefs")]
    if not all(isinstance(t, str) for t in texts):
        return None
    if not all(isinstance(r, list) and all(isinstance(x, str) for x in r) for r in refs):
        return None
    corpus_id, text_id, source, target = (str(t) for t in texts)
    return AlignInput(corpus_id, text_id, list(refs[0]), list(refs[1]), source, target)


def training_list(
    train_pairs: Sequence[tuple[str, str]], inputs: Sequence[AlignInput], max_segments: int | None
) -> list[tuple[str, str]]:
    """The training pairs, then the pairs to align not among them; at most `max_segments`."""
    pairs = list(train_pairs)
    seen = set(pairs)
    for row in inputs:
        pair = (row.source.strip(), row.target.strip())
        if pair[0] and pair[1] and pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    return pairs[:max_segments] if max_segments is not None else pairs


def build_alignment(args: JobSpec, store: ModelStore, progress: BuildProgress) -> AlignmentBuild:
    """Steps 1–5 of the module docstring; raises `Canceled` when the build is canceled."""
    extra = {"build_id": args.build_id, "engine_id": args.engine_id}
    options = AlignmentBuildOptions.parse(args.options_json)
    train_pairs = read_training_pairs(store, args.build_id)
    inputs, malformed = read_align_inputs(store, args.build_id)
    pairs = training_list(train_pairs, inputs, options.max_segments)
    if not pairs:
        raise AlignmentInputError(
            "nothing to train on: no pair of the build's corpora has text on both sides; check "
            "trainOn and wordAlignOn"
        )
    settings = AlignmentSettings(
        model_type=options.model_type,
        heuristic=options.symmetrization_heuristic,
        lowercase=options.lowercase,
        iterations=options.iterations,
    )
    progress.update(TRAIN[0], f"training a {options.model_type} aligner on {len(pairs)} pairs")
    with tempfile.TemporaryDirectory(prefix="serval-align-") as work:
        folder = Path(work) / "model"
        trained = train(
            pairs,
            folder,
            settings,
            progress=_training_progress(progress),
            check_canceled=progress.check_cancel,
        )
        log.info(
            "aligner trained",
            extra={
                **extra,
                "model_type": options.model_type,
                "pairs": trained.settings.train_pairs,
                "seconds": round(trained.seconds, 1),
                "direction_agreement": round(trained.agreement, 3),
            },
        )
        progress.check_cancel()
        aligner = ThotAligner.load(folder)
        try:
            rows, failed = align_rows(aligner, inputs, progress)
        finally:
            aligner.close()
        progress.check_cancel()
        warnings = _warnings(len(inputs) + malformed, malformed, failed, rows)
        for warning in warnings:
            log.warning("word alignment", extra={**extra, "warning": warning})
        if rows:
            progress.platform.insert_word_alignments(args.engine_id, rows)
        progress.update(ALIGN[1], f"publishing revision {args.revision}")
        manifest = Manifest(
            kind="model-revision",
            backend=BACKEND,
            engine_id=args.engine_id,
            revision=args.revision,
            build_id=args.build_id,
            source_language=args.source_language,
            target_language=args.target_language,
            scores={"direction_agreement": trained.agreement},
            training={"seconds": trained.seconds, "pairs": float(trained.settings.train_pairs)},
        )
        publish_revision(store, manifest, folder, None, check=progress.check_cancel)
    outcome = AlignmentBuild(
        corpus_size=trained.settings.train_pairs,
        confidence=round(100 * trained.agreement, 2),
        summary=(
            f": {options.model_type} aligner trained on {trained.settings.train_pairs} pairs in "
            f"{trained.seconds:.0f} s, {len(rows)} of {len(inputs) + malformed} pairs aligned"
        ),
        aligned=len(rows),
        warnings=warnings,
    )
    _report_execution_data(args, progress, outcome)
    return outcome


def align_rows(
    aligner: ThotAligner, inputs: Sequence[AlignInput], progress: BuildProgress
) -> tuple[list[WordAlignmentRow], list[AlignInput]]:
    """Align every input in chunks; a chunk Thot fails on is retried row by row, and the rows that
    still fail are returned as failed (never silently dropped)."""
    report = progress.within(*ALIGN, "Inference", "aligning sentence pairs")
    rows: list[WordAlignmentRow] = []
    failed: list[AlignInput] = []
    for start in range(0, len(inputs), ALIGN_CHUNK):
        progress.check_cancel()
        chunk = inputs[start : start + ALIGN_CHUNK]
        try:
            results = aligner.align_many([(row.source, row.target) for row in chunk])
            done = list(zip(chunk, results, strict=True))
        except Exception:
            log.exception("aligning a chunk failed; aligning its rows one by one")
            done = []
            for row in chunk:
                try:
                    done.append((row, aligner.align(row.source, row.target)))
                except Exception:
                    failed.append(row)
        rows += [
            WordAlignmentRow(
                corpus_id=row.corpus_id,
                text_id=row.text_id,
                source_refs=row.source_refs,
                target_refs=row.target_refs,
                source_tokens=result.source_tokens,
                target_tokens=result.target_tokens,
                alignment=[(link.source_index, link.target_index, link.score) for link in result.links],
            )
            for row, result in done
        ]
        report(min(start + ALIGN_CHUNK, len(inputs)), len(inputs))
    return rows, failed


def _warnings(
    total: int, malformed: int, failed: Sequence[AlignInput], rows: Sequence[WordAlignmentRow]
) -> list[str]:
    warnings: list[str] = []
    if malformed:
        warnings.append(f"{malformed} of {total} rows to align were malformed and were not aligned")
    if failed:
        named = [f"{r.corpus_id}/{r.text_id} {(r.source_refs or r.target_refs or [''])[0]}" for r in failed]
        shown = ", ".join(named[:MAX_WARNINGS_LISTED]) + (", …" if len(named) > MAX_WARNINGS_LISTED else "")
        warnings.append(f"{len(failed)} of {total} rows could not be aligned: {shown}")
    empty = sum(1 for r in rows if not r.source_tokens or not r.target_tokens)
    if empty:
        warnings.append(f"{empty} of {total} rows have no words on one side: they have no links")
    return warnings


def _training_progress(progress: BuildProgress) -> Progress:
    """Thot's training progress as build progress, at most one report per 2% of training."""
    last = [-1.0]

    def report(fraction: float, message: str) -> None:
        if fraction - last[0] < 0.02 and fraction < 1.0:
            return
        last[0] = fraction
        percent = round(100 * fraction)
        progress.phase("Train", percent, 100)
        progress.update(TRAIN[0] + (TRAIN[1] - TRAIN[0]) * fraction, f"{message}: {percent}%")

    return report


def _report_execution_data(args: JobSpec, progress: BuildProgress, outcome: AlignmentBuild) -> None:
    data = wa_platform_pb2.ExecutionData(
        train_count=outcome.corpus_size,
        word_align_count=outcome.aligned,
        warnings=outcome.warnings,
        engine_source_language_tag=args.source_language,
        engine_target_language_tag=args.target_language,
    )
    try:
        progress.platform.word_alignment_execution_data(args.engine_id, data)
    except grpc.RpcError as exc:
        if not (isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNIMPLEMENTED):
            raise
        # An API service without the word-alignment platform's call: the translation one's
        # `pretranslate_count` carries the aligned rows.
        progress.platform.execution_data(
            args.engine_id,
            platform_pb2.ExecutionData(
                train_count=outcome.corpus_size,
                pretranslate_count=outcome.aligned,
                warnings=outcome.warnings,
                resolved_source_language=args.source_language,
                resolved_target_language=args.target_language,
            ),
        )


class AlignmentBuildJob(FamilyBuildJob):
    """The `statistical` family's build job (`build_alignment`): it reports its own word-alignment
    execution data, and has no target text whose quotation marks matter."""

    reports_quote_conventions = False

    def build(self) -> Built:
        aligned = build_alignment(self.args, self.store, self.progress)
        return Built(
            corpus_size=aligned.corpus_size,
            confidence=aligned.confidence,
            summary=aligned.summary,
            log_extra={"word_align_count": aligned.aligned},
        )
