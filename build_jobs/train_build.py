"""A training build without the platform: corpus → base checkpoint → score → fine-tune → convert →
score (`train_model`, into a local folder) → publish `models/{engine}/{revision}` (files first,
manifest last; `train_revision` does both)."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from build_jobs.base_model.convert import convert_to_ctranslate2
from build_jobs.data import read_corpus
from build_jobs.evaluate import evaluate
from build_jobs.finetune import Canceled, Progress, ShouldCancel, finetune
from build_jobs.publish import HF_SUBFOLDER, base_model_prefix, checkpoint_max_positions, publish_revision
from serval_common.build_options import BuildOptions
from serval_common.manifest import Manifest, ManifestError, fetch_folder
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

Phase = Callable[[float, str], None]
"""(fraction of the whole build done, message)"""

# Shares of the build's progress: training is most of it.
TRAIN_START, TRAIN_END = 0.15, 0.85


@dataclass(frozen=True)
class TrainedRevision:
    manifest: Manifest
    train_pairs: int
    eval_pairs: int
    steps: int
    seconds: float


@dataclass(frozen=True)
class TrainedModel:
    """A fine-tuned model in local folders, not yet published."""

    manifest: Manifest
    """the revision's manifest; its files are listed when it is published"""
    ct2_dir: Path
    hf_dir: Path
    train_pairs: int
    eval_pairs: int
    steps: int
    seconds: float


def train_revision(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    base_model: str,
    source_language: str,
    target_language: str,
    options: BuildOptions,
    phase: Phase | None = None,
    on_train_step: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
    work_dir: Path | None = None,
) -> TrainedRevision:
    """`train_model`, then publish the model as the revision."""
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        trained = train_model(
            store,
            engine_id=engine_id,
            revision=revision,
            build_id=build_id,
            base_model=base_model,
            source_language=source_language,
            target_language=target_language,
            options=options,
            work=Path(tmp),
            phase=phase,
            on_train_step=on_train_step,
            should_cancel=should_cancel,
        )
        published = publish_revision(
            store,
            trained.manifest,
            trained.ct2_dir,
            trained.hf_dir,
            check=lambda: _check_cancel(should_cancel),
        )
    return TrainedRevision(
        manifest=published,
        train_pairs=trained.train_pairs,
        eval_pairs=trained.eval_pairs,
        steps=trained.steps,
        seconds=trained.seconds,
    )


def _check_cancel(should_cancel: ShouldCancel | None) -> None:
    if should_cancel is not None and should_cancel():
        raise Canceled("the build was canceled")


def train_model(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    base_model: str,
    source_language: str,
    target_language: str,
    options: BuildOptions,
    work: Path,
    phase: Phase | None = None,
    on_train_step: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
) -> TrainedModel:
    """Fine-tune and score the model in `work` (a folder the caller owns and removes)."""

    def report(fraction: float, message: str) -> None:
        log.info("build phase", extra={"build_id": build_id, "progress": fraction, "detail": message})
        if phase is not None:
            phase(fraction, message)

    def check_cancel() -> None:
        _check_cancel(should_cancel)

    corpus = read_corpus(store, build_id, eval_share=options.eval_share, seed=options.seed)
    report(
        0.02,
        f"corpus: {len(corpus.train)} training pairs, {len(corpus.evaluation)} held out, "
        f"{corpus.dropped} empty pairs dropped",
    )
    base, base_dir = fetch_folder(store, base_model_prefix(base_model), work / "cache")
    hf_dir = base_dir / HF_SUBFOLDER
    if not (hf_dir / "config.json").is_file():
        raise ManifestError(
            f"base model {base_model!r} has no Hugging Face checkpoint under {HF_SUBFOLDER}/ "
            "and cannot be fine-tuned; publish it again with its checkpoint"
        )
    check_cancel()
    report(0.05, "scoring the base model on the held-out pairs")
    before = evaluate(base_dir, corpus.evaluation, source_language, target_language)
    check_cancel()

    span = TRAIN_END - TRAIN_START

    def on_step(step: int, total: int, loss: float, lr: float) -> None:
        report(TRAIN_START + span * step / total, f"training step {step}/{total}, loss {loss:.3f}")
        if on_train_step is not None:
            on_train_step(step, total, loss, lr)

    report(TRAIN_START, f"fine-tuning {base_model} for at most {options.max_steps} steps")
    out_hf = work / "hf"
    result = finetune(
        hf_dir,
        out_hf,
        corpus.train,
        source_language,
        target_language,
        previously_added=base.added_language_codes,
        max_steps=options.max_steps,
        time_budget_s=options.time_budget_s,
        lr=options.learning_rate,
        batch_size=options.batch_size,
        gradient_accumulation=options.gradient_accumulation,
        max_length=options.max_length,
        lr_schedule=options.lr_schedule,
        warmup_steps=options.warmup_steps,
        freeze=options.freeze,
        seed=options.seed,
        progress=on_step,
        should_cancel=should_cancel,
    )
    stop = "time budget spent" if result.stopped_by_budget else "step limit reached"
    report(TRAIN_END, f"trained {result.steps} steps in {result.seconds:.0f} s on {result.device} ({stop})")
    check_cancel()
    ct2_dir = convert_to_ctranslate2(out_hf, work / "ct2", quantization=options.quantization)
    report(0.88, "scoring the fine-tuned model on the held-out pairs")
    after = evaluate(ct2_dir, corpus.evaluation, source_language, target_language)
    check_cancel()
    import ctranslate2

    manifest = Manifest(
        kind="model-revision",
        engine_id=engine_id,
        revision=revision,
        build_id=build_id,
        base_model=base_model,
        source_language=source_language,
        target_language=target_language,
        languages=[*base.languages, *(c for c in result.added_language_codes if c not in base.languages)],
        added_language_codes=result.added_language_codes,
        ctranslate2_version=ctranslate2.__version__,
        quantization=options.quantization,
        max_positions=checkpoint_max_positions(out_hf),
        training={
            "steps": result.steps,
            "seconds": round(result.seconds, 2),
            "steps_per_second": round(result.steps / result.seconds, 2) if result.seconds else 0.0,
            "stopped_by_budget": float(result.stopped_by_budget),
        },
        scores={
            "chrf_before": before.chrf,
            "chrf_after": after.chrf,
            "bleu_before": before.bleu,
            "bleu_after": after.bleu,
        },
    )
    report(0.9, f"trained revision {revision} (chrF {before.chrf:.1f} → {after.chrf:.1f})")
    return TrainedModel(
        manifest=manifest,
        ct2_dir=ct2_dir,
        hf_dir=out_hf,
        train_pairs=len(corpus.train),
        eval_pairs=len(corpus.evaluation),
        steps=result.steps,
        seconds=result.seconds,
    )
