"""The `nmt` family's build job: fine-tune the base model on the build's corpora (or take the base
model as it is, an inference-only build), pretranslate with the model about to be published, and
publish the revision last. Publishing comes last, so a cancel or a failure in any earlier phase
leaves nothing in the model store (docs/build-options.md, "Phases and cancels")."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from build_jobs.progress import BuildProgress
from build_jobs.publish import base_model_prefix, inference_only_manifest, publish_revision
from build_jobs.template import Built, FamilyBuildJob
from serval_common.build_options import BuildOptions
from serval_common.jobs import JobSpec
from serval_common.manifest import Manifest
from serval_common.settings import Settings
from serval_common.store import ModelStore

# Where pretranslation sits in the build's progress, after training or after taking the base model.
PRETRANSLATE_AFTER_TRAINING = (0.9, 0.96)
PRETRANSLATE_BASE_MODEL = (0.1, 0.9)


@dataclass(frozen=True)
class Outcome:
    corpus_size: int
    confidence: float
    scores: dict[str, float]
    summary: str
    """the build's last message, after `published revision N`"""


@dataclass(frozen=True)
class Prepared:
    """The revision to publish: a trained model in local folders, or (no folders) the base
    model's weights."""

    outcome: Outcome
    manifest: Manifest
    ct2_dir: Path | None = None
    hf_dir: Path | None = None


class NmtBuildJob(FamilyBuildJob):
    def __init__(self, args: JobSpec, settings: Settings, store: ModelStore, progress: BuildProgress) -> None:
        super().__init__(args, settings, store, progress)
        self.options = BuildOptions.parse(args.options_json)
        self.base_model = self.options.base_model or settings.jobs.default_base_model

    def build(self) -> Built:
        args, store, progress = self.args, self.store, self.progress
        with tempfile.TemporaryDirectory(prefix="serval-build-") as work:
            if args.train:
                prepared = _train(args, self.options, self.base_model, store, progress, Path(work))
            else:
                prepared = _take_base_model(args, self.base_model, store, progress)
            pretranslated = _pretranslate(args, self.options, self.base_model, store, progress, prepared)
            progress.update(0.97 if args.train else 0.95, f"publishing revision {args.revision}")
            publish_revision(
                store, prepared.manifest, prepared.ct2_dir, prepared.hf_dir, check=progress.check_cancel
            )
        outcome = prepared.outcome
        return Built(
            corpus_size=outcome.corpus_size,
            confidence=outcome.confidence,
            summary=outcome.summary,
            scores=outcome.scores,
            pretranslated=pretranslated,
        )


def _take_base_model(args: JobSpec, base_model: str, store: ModelStore, progress: BuildProgress) -> Prepared:
    progress.update(0.1, f"revision {args.revision} serves the base model {base_model}")
    manifest = inference_only_manifest(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        base_model=base_model,
        source_language=args.source_language,
        target_language=args.target_language,
    )
    outcome = Outcome(corpus_size=0, confidence=0.0, scores={}, summary=" (the base model's weights)")
    return Prepared(outcome=outcome, manifest=manifest)


def _train(
    args: JobSpec,
    options: BuildOptions,
    base_model: str,
    store: ModelStore,
    progress: BuildProgress,
    work: Path,
) -> Prepared:
    from build_jobs.train_build import train_model

    trained = train_model(
        store,
        engine_id=args.engine_id,
        revision=args.revision,
        build_id=args.build_id,
        base_model=base_model,
        source_language=args.source_language,
        target_language=args.target_language,
        options=options,
        work=work,
        phase=progress.update,
        on_train_step=progress.train_step,
        should_cancel=progress.should_cancel,
    )
    scores = trained.manifest.scores
    for name, value in scores.items():
        metric, when = name.rsplit("_", 1)
        progress.scalar(metric, when, value, 0 if when == "before" else trained.steps)
    summary = (
        f": trained {trained.steps} steps in {trained.seconds:.0f} s, "
        f"chrF {scores['chrf_before']:.1f} → {scores['chrf_after']:.1f} "
        f"({trained.train_pairs} training pairs, {trained.eval_pairs} held out)"
    )
    outcome = Outcome(
        corpus_size=trained.train_pairs,
        confidence=scores.get("chrf_after", 0.0),
        scores=scores,
        summary=summary,
    )
    return Prepared(
        outcome=outcome, manifest=trained.manifest, ct2_dir=trained.ct2_dir, hf_dir=trained.hf_dir
    )


def _pretranslate(
    args: JobSpec,
    options: BuildOptions,
    base_model: str,
    store: ModelStore,
    progress: BuildProgress,
    prepared: Prepared,
) -> int:
    """Pretranslate with the model the build is about to publish (the trained model's local
    folder, or the base model) and stream the rows; clients see them once the build completes."""
    from build_jobs.pretranslate import decoding_limit, pretranslate, pretranslate_stored_model

    if prepared.ct2_dir is not None:
        report = progress.within(*PRETRANSLATE_AFTER_TRAINING, "Inference", "pretranslating segments")
        rows = pretranslate(
            store,
            args.build_id,
            prepared.ct2_dir,
            args.source_language,
            args.target_language,
            beams=options.pretranslate_beams,
            batch_size=options.pretranslate_batch_size,
            max_length=decoding_limit(prepared.manifest.max_positions),
            progress=report,
            should_cancel=progress.should_cancel,
        )
    else:
        report = progress.within(*PRETRANSLATE_BASE_MODEL, "Inference", "pretranslating segments")
        rows = pretranslate_stored_model(
            store,
            base_model_prefix(base_model),
            build_id=args.build_id,
            source_code=args.source_language,
            target_code=args.target_language,
            beams=options.pretranslate_beams,
            batch_size=options.pretranslate_batch_size,
            progress=report,
            should_cancel=progress.should_cancel,
        )
    progress.check_cancel()
    if rows:
        progress.platform.insert_pretranslations(args.engine_id, rows)
    return len(rows)
