"""The `nmt` family's build job: fine-tune the base model on the build's corpora (or take the base
model as it is, an inference-only build), pretranslate with the model about to be published, and
publish the revision last. Publishing comes last, so a cancel or a failure in any earlier phase
leaves nothing in the model store (docs/build-options.md, "Phases and cancels"). A fine-tune with
`fuzzyMatches` (the default) publishes the memory of its pairs in the revision's folder, and
pretranslation gives the model each segment's match from it, as the node does; an inference-only
revision is always plain (docs/build-options.md, "Fuzzy matches").

A fine-tune that lowers the held-out chrF below the base model's is said so in the build's last
message (and, from its revision's manifest, in the build's diagnostics); when the deployment does
not publish worse models (`jobs.publish_worse_models = false`) the build faults right after
scoring, before pretranslating: a Faulted build leaves the engine's model, its pretranslations
and its revision number as they were, which no Completed build could (docs/build-options.md)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict

from build_jobs.progress import BuildProgress
from build_jobs.publish import base_model_prefix, inference_only_manifest, publish_revision
from build_jobs.template import Built, FamilyBuildJob
from serval_common.build_options import NmtBuildOptions
from serval_common.jobs import JobSpec
from serval_common.manifest import Manifest
from serval_common.settings import Settings
from serval_common.store import ModelStore

# Where pretranslation sits in the build's progress, after training or after taking the base model.
PRETRANSLATE_AFTER_TRAINING = (0.9, 0.96)
PRETRANSLATE_BASE_MODEL = (0.1, 0.9)


@dataclass(frozen=True)
class Prepared:
    """The revision to publish: a trained model in local folders, or (no folders) the base
    model's weights; `built`, what the build reports once it is published (less what it
    pretranslated)."""

    built: Built
    manifest: Manifest
    ct2_dir: Path | None = None
    hf_dir: Path | None = None


class RevisionFields(TypedDict):
    """The revision a build makes, as `inference_only_manifest` and `train_model` take it."""

    engine_id: str
    revision: int
    build_id: str
    base_model: str
    source_language: str
    target_language: str


class NmtBuildJob(FamilyBuildJob):
    def __init__(self, args: JobSpec, settings: Settings, store: ModelStore, progress: BuildProgress) -> None:
        super().__init__(args, settings, store, progress)
        self.options = NmtBuildOptions.parse(args.options_json)
        self.base_model = self.options.base_model or settings.jobs.default_base_model
        self.revision = RevisionFields(
            engine_id=args.engine_id,
            revision=args.revision,
            build_id=args.build_id,
            base_model=self.base_model,
            source_language=args.source_language,
            target_language=args.target_language,
        )

    def build(self) -> Built:
        args, store, progress = self.args, self.store, self.progress
        with tempfile.TemporaryDirectory(prefix="serval-build-") as work:
            if self.options.micro_build is not None:
                prepared = self._micro_build(Path(work))
                pretranslated = 0
            else:
                prepared = self._train(Path(work)) if args.train else self._take_base_model()
                pretranslated = self._pretranslate(prepared)
            progress.update(0.97 if args.train else 0.95, f"publishing revision {args.revision}")
            publish_revision(
                store, prepared.manifest, prepared.ct2_dir, prepared.hf_dir, check=progress.check_cancel
            )
        return replace(prepared.built, pretranslated=pretranslated)

    def _take_base_model(self) -> Prepared:
        self.progress.update(0.1, f"revision {self.args.revision} serves the base model {self.base_model}")
        manifest = inference_only_manifest(self.store, **self.revision)
        built = Built(corpus_size=0, confidence=0.0, summary=" (the base model's weights)")
        return Prepared(built=built, manifest=manifest)

    def _micro_build(self, work: Path) -> Prepared:
        """Continue the engine's revision on the pairs confirmed since it (docs/learning.md)."""
        from build_jobs.nmt.micro_build import micro_build_model

        micro, progress, args = self.options.micro_build, self.progress, self.args
        assert micro is not None
        trained, parent = micro_build_model(
            self.store,
            engine_id=args.engine_id,
            revision=args.revision,
            build_id=args.build_id,
            source_language=args.source_language,
            target_language=args.target_language,
            options=self.options,
            micro=micro,
            work=work,
            phase=progress.update,
            on_train_step=progress.train_step,
            should_cancel=progress.should_cancel,
        )
        training = trained.manifest.training
        built = Built(
            corpus_size=trained.train_pairs,
            confidence=parent.scores.get("chrf_after", 0.0),
            summary=(
                f": micro-build of revision {micro.parent_revision}, {int(training['new_pairs'])} new pairs and "
                f"{int(training['replayed_pairs'])} replayed, {trained.steps} steps in {trained.seconds:.0f} s"
            ),
        )
        return Prepared(
            built=built, manifest=trained.manifest, ct2_dir=trained.ct2_dir, hf_dir=trained.hf_dir
        )

    def _train(self, work: Path) -> Prepared:
        from build_jobs.nmt.train_build import refuse_worse, train_model

        progress, jobs = self.progress, self.settings.jobs
        trained = train_model(
            self.store,
            **self.revision,
            options=self.options,
            work=work,
            deployment=jobs.training_defaults(),
            phase=progress.update,
            on_train_step=progress.train_step,
            should_cancel=progress.should_cancel,
        )
        refuse_worse(trained, jobs.publish_worse_models)
        scores = trained.manifest.scores
        for name, value in scores.items():
            metric, when = name.rsplit("_", 1)
            progress.scalar(metric, when, value, 0 if when == "before" else trained.steps)
        summary = (
            f": trained {trained.steps} steps in {trained.seconds:.0f} s, "
            f"chrF {scores['chrf_before']:.1f} → {scores['chrf_after']:.1f} "
            f"({trained.train_pairs} training pairs, {trained.eval_pairs} held out)"
        )
        if trained.chrf_worse:
            summary += f". {trained.worse_sentence(published=True)}"
        built = Built(
            corpus_size=trained.train_pairs,
            confidence=scores.get("chrf_after", 0.0),
            summary=summary,
            scores=scores,
        )
        return Prepared(
            built=built, manifest=trained.manifest, ct2_dir=trained.ct2_dir, hf_dir=trained.hf_dir
        )

    def _pretranslate(self, prepared: Prepared) -> int:
        """Pretranslate with the model the build is about to publish (the trained model's local
        folder, or the base model) and stream the rows; clients see them once the build completes."""
        from build_jobs.nmt.pretranslation import (
            decoding_limit,
            pretranslate,
            pretranslate_stored_model,
            revision_memory,
        )

        args, options, store, progress = self.args, self.options, self.store, self.progress
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
                memory=revision_memory(prepared.manifest, prepared.ct2_dir),
                progress=report,
                should_cancel=progress.should_cancel,
            )
        else:
            report = progress.within(*PRETRANSLATE_BASE_MODEL, "Inference", "pretranslating segments")
            rows = pretranslate_stored_model(
                store,
                base_model_prefix(self.base_model),
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
