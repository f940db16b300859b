"""A training build without the platform: corpus → base checkpoint → score → fine-tune → convert →
score (`train_model`, into a local folder) → publish `models/{engine}/{revision}` (files first,
manifest last; `train_revision` does both).

The fine-tune's hyperparameters are the build's options where it set them, else the deployment's
(`jobs.*` settings), else the base model manifest's `training_defaults`, else the code's defaults
(`NmtBuildOptions.training`); the revision's manifest records them and where each came from. A
fine-tune that lowers the held-out chrF is published only when the deployment allows it
(`refuse_worse`, `jobs.publish_worse_models`).

With `fuzzyMatches` (the default) the fine-tune also trains on each pair's source followed by the
target of its best fuzzy match among the other training pairs (Neural Fuzzy Repair, Bulte &
Tezcan 2019; `serval_common.fuzzy_memory`), is scored the same way, and the revision publishes the
memory of all the build's pairs (`MEMORY_FILE`) with `input_format` `fuzzy-match`."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from build_jobs.base_model.convert import convert_to_ctranslate2
from build_jobs.data import Corpus, read_corpus
from build_jobs.nmt.evaluation import evaluate, match_targets
from build_jobs.nmt.finetune import Progress, ShouldCancel, finetune
from build_jobs.progress import Canceled
from build_jobs.publish import HF_SUBFOLDER, base_model_prefix, checkpoint_max_positions, publish_revision
from serval_common.build_options import (
    SOURCE_WORDS,
    NmtBuildOptions,
    TrainingDefaults,
    TrainingHyperparameters,
)
from serval_common.fine_tune_scores import chrf_worse, worse_sentence
from serval_common.fuzzy_memory import FUZZY_MATCH_INPUT, MEMORY_FILE, TranslationMemory
from serval_common.manifest import Manifest, ManifestError, fetch_folder, read_manifest
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

    @property
    def hyperparameters(self) -> TrainingHyperparameters:
        assert self.manifest.hyperparameters is not None, "a trained model's manifest records them"
        return self.manifest.hyperparameters

    @property
    def chrf_worse(self) -> bool:
        """Whether fine-tuning lowered the held-out chrF below the base model's."""
        scores = self.manifest.scores
        return chrf_worse(scores["chrf_before"], scores["chrf_after"])

    def worse_sentence(self, *, published: bool) -> str:
        scores = self.manifest.scores
        return worse_sentence(
            scores["chrf_before"],
            scores["chrf_after"],
            published=published,
            learning_rate=self.hyperparameters.values.learning_rate,
        )


@dataclass(frozen=True)
class FuzzyMatches:
    """The target of each pair's fuzzy match (None: none), for the training and the held-out pairs."""

    train: list[str | None]
    evaluation: list[str | None]

    def describe(self) -> str:
        found = [sum(match is not None for match in side) for side in (self.train, self.evaluation)]
        return (
            f"fuzzy matches for {found[0]} of {len(self.train)} training pairs and "
            f"{found[1]} of {len(self.evaluation)} held out"
        )


def retrieve_matches(corpus: Corpus, check: Callable[[], None] | None = None) -> FuzzyMatches:
    """Matches from a memory of the training pairs alone. A training pair is never its own match:
    one that were would teach the model to copy its input's match, whereas a new source's match is
    the translation of another sentence, to repair. A held-out pair gets its match as an unseen source would when served, from the pairs the
    model trained on, never from the held-out targets it is scored against. `check`: raises to
    stop (a cancel), called as the search goes."""
    memory = TranslationMemory(corpus.train)
    return FuzzyMatches(
        train=match_targets(memory, [s for s, _ in corpus.train], other_than_itself=True, check=check),
        evaluation=match_targets(memory, [s for s, _ in corpus.evaluation], check=check),
    )


def write_memory(corpus: Corpus, folder: Path) -> Path:
    """The revision's memory, of all the build's pairs (held-out ones too: once published, every
    pair the engine has is a match a source may get), as `MEMORY_FILE` in the model folder, so it
    is published, listed and verified with the weights."""
    path = folder / MEMORY_FILE
    TranslationMemory([*corpus.train, *corpus.evaluation]).write(path)
    return path


class WorseModelRefused(Exception):
    """The fine-tune lowered the held-out chrF and the deployment does not publish worse models
    (`jobs.publish_worse_models = false`): the build faults with this message, publishing nothing."""


def refuse_worse(trained: TrainedModel, publish_worse_models: bool) -> None:
    """Raise `WorseModelRefused` for a worse model the deployment does not publish."""
    if trained.chrf_worse and not publish_worse_models:
        raise WorseModelRefused(trained.worse_sentence(published=False))


def train_revision(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    base_model: str,
    source_language: str,
    target_language: str,
    options: NmtBuildOptions,
    deployment: TrainingDefaults | None = None,
    publish_worse_models: bool = True,
    phase: Phase | None = None,
    on_train_step: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
    work_dir: Path | None = None,
) -> TrainedRevision:
    """`train_model`, then publish the model as the revision (`refuse_worse` first)."""
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
            deployment=deployment,
            work=Path(tmp),
            phase=phase,
            on_train_step=on_train_step,
            should_cancel=should_cancel,
        )
        refuse_worse(trained, publish_worse_models)
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
    options: NmtBuildOptions,
    work: Path,
    deployment: TrainingDefaults | None = None,
    phase: Phase | None = None,
    on_train_step: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
) -> TrainedModel:
    """Fine-tune and score the model in `work` (a folder the caller owns and removes).
    `deployment`: the deployment's training defaults (`JobSettings.training_defaults`)."""

    def report(fraction: float, message: str) -> None:
        log.info("build phase", extra={"build_id": build_id, "progress": fraction, "detail": message})
        if phase is not None:
            phase(fraction, message)

    def check_cancel() -> None:
        _check_cancel(should_cancel)

    base_manifest = read_manifest(store, base_model_prefix(base_model))
    hyperparameters = options.training(deployment, base_manifest.training_defaults)
    options = options.model_copy(update=hyperparameters.values.given())
    log.info(
        "training hyperparameters",
        extra={"build_id": build_id, "base_model": base_model, **hyperparameters.wire()},
    )
    corpus = read_corpus(store, build_id, eval_share=options.eval_share, seed=options.seed)
    report(
        0.02,
        f"corpus: {len(corpus.train)} training pairs, {len(corpus.evaluation)} held out, "
        f"{corpus.dropped} empty pairs dropped",
    )
    matches = None
    if options.fuzzy_matches:
        report(0.03, f"retrieving fuzzy matches for {len(corpus.train) + len(corpus.evaluation)} pairs")
        matches = retrieve_matches(corpus, check_cancel)
        report(0.04, matches.describe())
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

    lr_source = hyperparameters.sources["learning_rate"]
    report(
        TRAIN_START,
        f"fine-tuning {base_model} for at most {options.max_steps} steps at learning rate "
        f"{options.learning_rate:g} ({SOURCE_WORDS[lr_source]})",
    )
    out_hf = work / "hf"
    result = finetune(
        hf_dir,
        out_hf,
        corpus.train,
        source_language,
        target_language,
        matches=None if matches is None else matches.train,
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
    if matches is not None:
        write_memory(corpus, ct2_dir)
    report(
        0.88,
        "scoring the fine-tuned model on the held-out pairs"
        + ("" if matches is None else " with their fuzzy matches"),
    )
    after = evaluate(
        ct2_dir,
        corpus.evaluation,
        source_language,
        target_language,
        matches=None if matches is None else matches.evaluation,
    )
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
        # What it serves: the base model's languages and the pair it was trained on.
        languages=list(
            dict.fromkeys([*base.languages, *result.added_language_codes, source_language, target_language])
        ),
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
        hyperparameters=hyperparameters,
    )
    if matches is not None:  # (`FUZZY_MATCH_INPUT` is a plain `str` to mypy, not the field's Literal)
        manifest = manifest.model_copy(update={"input_format": FUZZY_MATCH_INPUT})
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
