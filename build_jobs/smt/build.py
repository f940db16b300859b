"""An `smt-transfer` build: train a Thot model on the exported pairs, pretranslate with it, publish
it as the engine's revision (files first, manifest last), in that order, so a cancel or failure
before the end leaves nothing in the model store.

Progress: training maps onto 2–85% of the build (phase `Train`, step = percent of Thot's
training), pretranslation onto 85–95% (phase `Inference`), publishing onto 97%. A cancel is
noticed between Thot's steps, between tuning evaluations, between pretranslated segments and
between uploaded files.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_jobs.data import Corpus, Row, read_corpus, read_source_rows, target_key
from build_jobs.progress import BuildProgress, Canceled
from build_jobs.publish import publish_revision
from build_jobs.template import Built, FamilyBuildJob
from serval_common.jobs import JobSpec
from serval_common.manifest import Manifest
from serval_common.smt_build_options import SmtBuildOptions
from serval_common.store import ModelStore
from serval_common.thot_smt import BACKEND, SmtFolder, capitalize_sentence_start, load_engine

log = logging.getLogger(__name__)

TRAIN_SPAN = (0.02, 0.85)
PRETRANSLATE_SPAN = (0.85, 0.95)
EMPTY_CORPUS = Corpus(train=[], evaluation=[], dropped=0)
REPORT_EVERY_S = 2.0
"""Thot reports progress many times a second; the API service hears at most this often (and at
every new message)."""


@dataclass(frozen=True)
class SmtOutcome:
    corpus_size: int
    confidence: float
    scores: dict[str, float]
    summary: str
    pretranslated: int
    manifest: Manifest = field(repr=False)


def build_smt(args: JobSpec, store: ModelStore, progress: BuildProgress) -> SmtOutcome:
    """Train, pretranslate and publish; raises `Canceled` on a cancel, anything else on failure."""
    from build_jobs.smt.train import train_smt

    options = SmtBuildOptions.parse(args.options_json)
    if args.train:
        progress.update(TRAIN_SPAN[0], "reading the training corpus")
        corpus = _held_out(
            read_corpus(store, args.build_id, eval_share=options.eval_share, seed=options.seed), options
        )
    else:
        # Nothing to train on (`trainOn: []`, or corpora without pairs): as Serval's SMT build, which
        # trains Thot on whatever the corpora hold, an empty model; it translates each word as itself.
        progress.update(TRAIN_SPAN[0], "no training pairs: an empty model")
        corpus = EMPTY_CORPUS
    with tempfile.TemporaryDirectory(prefix="serval-smt-") as work:
        trained = train_smt(
            corpus,
            options,
            Path(work) / "model",
            phase=_train_reporter(progress),
            should_cancel=progress.should_cancel,
        )
        progress.check_cancel()
        report = progress.within(*PRETRANSLATE_SPAN, "Inference", "pretranslating segments")
        rows = pretranslate_smt(
            store, args.build_id, trained.folder, progress=report, should_cancel=progress.should_cancel
        )
        progress.check_cancel()
        if rows:
            progress.platform.insert_pretranslations(args.engine_id, rows)
        scores = {"chrf": trained.chrf, "chrf_truecaser_only": trained.chrf_truecaser_only}
        manifest = Manifest(
            kind="model-revision",
            backend=BACKEND,
            engine_id=args.engine_id,
            revision=args.revision,
            build_id=args.build_id,
            source_language=args.source_language,
            target_language=args.target_language,
            scores=scores,
            training={
                "seconds": round(trained.seconds, 1),
                "pairs": trained.train_pairs,
                "tuning_evaluations": trained.tuning_evaluations,
            },
        )
        progress.update(0.97, f"publishing revision {args.revision}")
        published = publish_revision(store, manifest, trained.folder, check=progress.check_cancel)
    summary = (
        f": trained a Thot phrase-based model on {trained.train_pairs} pairs in {trained.seconds:.0f} s "
        f"({trained.tuning_evaluations} tuning evaluations), chrF {trained.chrf:.1f} on "
        f"{trained.eval_pairs} held-out pairs"
    )
    return SmtOutcome(
        # Every pair the revision learned from, held-out ones included: Serval's corpusSize counts
        # them all (sil-machine's Thot trainer reports its training and tuning pairs together).
        corpus_size=trained.train_pairs + trained.eval_pairs,
        confidence=trained.chrf,
        scores=scores,
        summary=summary,
        pretranslated=len(rows),
        manifest=published,
    )


def _held_out(corpus: Corpus, options: SmtBuildOptions) -> Corpus:
    """At most `maxEvalPairs` held out; the rest go back to training."""
    extra = corpus.evaluation[options.max_eval_pairs :]
    if not extra:
        return corpus
    return Corpus(
        train=corpus.train + extra,
        evaluation=corpus.evaluation[: options.max_eval_pairs],
        dropped=corpus.dropped,
    )


def _train_reporter(progress: BuildProgress) -> Callable[[float, str], None]:
    start, end = TRAIN_SPAN
    last: dict[str, Any] = {"at": 0.0, "message": None}

    def phase(fraction: float, message: str) -> None:
        step = min(100, max(0, math.floor(fraction * 100)))
        kind = message.split(" (")[0]
        now = time.monotonic()
        if kind == last["message"] and now - last["at"] < REPORT_EVERY_S and fraction < 1.0:
            return
        last.update(at=now, message=kind)
        progress.phase("Train", step, 100)
        progress.update(start + (end - start) * fraction, message)

    return phase


def pretranslate_smt(
    store: ModelStore,
    build_id: str,
    folder: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    every: int = 25,
) -> list[Row]:
    """`build_jobs.data.read_source_rows`'s rows translated with the Thot model in `folder`: the target
    file is written and the rows returned. `confidence` is the mean of the words' confidences
    (sil-machine's IBM-1 estimate, 0..1); an empty source gets an empty translation
    (confidence 1) without reaching the model."""
    import json

    rows = read_source_rows(store, build_id)
    if not rows:
        return []
    out = [{**row, "translation": "", "confidence": 1.0} for row in rows]
    pending = [i for i, row in enumerate(rows) if str(row.get("translation") or "").strip()]
    if pending:
        settings = SmtFolder.read(folder)
        engine = load_engine(folder, settings)
        detok = engine.target_detokenizer
        try:
            for done, i in enumerate(pending, 1):
                if should_cancel is not None and should_cancel():
                    raise Canceled("the build was canceled while pretranslating")
                result = engine.translate(str(rows[i]["translation"]))
                tokens = capitalize_sentence_start(
                    list(result.target_tokens), settings.capitalize_sentence_start
                )
                out[i]["translation"] = detok.detokenize(tokens)
                confidences = list(result.confidences)
                out[i]["confidence"] = sum(confidences) / len(confidences) if confidences else 0.0
                if progress is not None and (done % every == 0 or done == len(pending)):
                    progress(done, len(pending))
        finally:
            engine.close()
    store.write_bytes(target_key(build_id), json.dumps(out, ensure_ascii=False).encode())
    log.info("pretranslated", extra={"build_id": build_id, "rows": len(out), "translated": len(pending)})
    return out


class SmtBuildJob(FamilyBuildJob):
    """The `smt-transfer` family's build job (`build_smt`)."""

    def build(self) -> Built:
        smt = build_smt(self.args, self.store, self.progress)
        return Built(
            corpus_size=smt.corpus_size,
            confidence=smt.confidence,
            summary=smt.summary,
            scores=smt.scores,
            pretranslated=smt.pretranslated,
        )
