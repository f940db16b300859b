"""A micro-build's job (docs/learning.md): a short fine-tune of the engine's current revision on the
pairs a translator confirmed since it, plus a replay sample of the engine's other pairs, published
as the next revision with the memory of all the engine's pairs.

The API service starts it (`serval_api/service/micro_builds.py`) with `options.microBuild`: the
revision it continues (`parentRevision`), how many of the build's pairs are new (`newPairs`: the
export writes the engine's train-segment pairs last, oldest first) and how many other pairs to
replay per new one (`replay`, at least `MIN_REPLAY` in all). It starts from the parent's
training checkpoint with the parent's hyperparameters, except the steps: `PASSES` passes over its
pairs, at most `maxSteps` (which the service sets).
It scores nothing (the engine's confidence stays the parent's held-out chrF) and pretranslates
nothing.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from build_jobs.base_model.convert import convert_to_ctranslate2
from build_jobs.data import CorpusError, read_pairs
from build_jobs.nmt.evaluation import match_targets
from build_jobs.nmt.finetune import Progress, ShouldCancel, finetune
from build_jobs.nmt.train_build import TRAIN_END, TRAIN_START, TrainedModel
from build_jobs.publish import HF_SUBFOLDER, checkpoint_max_positions
from serval_common.build_options import MicroBuild, NmtBuildOptions
from serval_common.fuzzy_memory import FUZZY_MATCH_INPUT, MEMORY_FILE, TranslationMemory
from serval_common.manifest import Manifest, ManifestError, fetch_folder
from serval_common.model_revision import ModelRevision
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

PASSES = 2
"""Times a micro-build goes over its pairs (new and replayed): more, with a handful of new pairs,
overfits them; its steps are at most `maxSteps` (`learning.micro_build_steps`)."""
MIN_STEPS = 4
MIN_REPLAY = 16
"""Replayed pairs at least, when the engine has them: a handful of new pairs alone would pull a
few dozen steps' worth of weights towards themselves."""


def sample(
    pairs: list[tuple[str, str]], micro: MicroBuild, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(new pairs, replayed pairs): the last `micro.new_pairs` of the build's pairs, and a random
    sample of the others."""
    if not pairs:
        raise CorpusError("a micro-build needs the engine's pairs; the build's corpus is empty")
    new = pairs[-micro.new_pairs :]
    rest = pairs[: len(pairs) - len(new)]
    count = min(len(rest), max(MIN_REPLAY, micro.replay * len(new)))
    return new, random.Random(seed).sample(rest, count)


def micro_build_model(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    source_language: str,
    target_language: str,
    options: NmtBuildOptions,
    micro: MicroBuild,
    work: Path,
    phase: Callable[[float, str], None] | None = None,
    on_train_step: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
) -> tuple[TrainedModel, Manifest]:
    """Fine-tune the parent revision in `work` (a folder the caller owns); the result, and the
    parent's manifest (whose held-out scores stay the engine's confidence)."""

    def report(fraction: float, message: str) -> None:
        log.info("build phase", extra={"build_id": build_id, "progress": fraction, "detail": message})
        if phase is not None:
            phase(fraction, message)

    parent_location = ModelRevision(engine_id, micro.parent_revision).checked_location()
    parent, parent_dir = fetch_folder(store, parent_location, work / "cache")
    hf_dir = parent_dir / HF_SUBFOLDER
    if not (hf_dir / "config.json").is_file() or parent.input_format != FUZZY_MATCH_INPUT:
        raise ManifestError(
            f"revision {micro.parent_revision} cannot be continued by a micro-build: it is not a "
            "fine-tuned revision that reads fuzzy matches; run a full build"
        )
    pairs = read_pairs(store, build_id)
    new, replay = sample(pairs, micro, options.seed)
    train = [*new, *replay]
    memory = TranslationMemory(pairs)
    report(
        0.05, f"micro-build of revision {micro.parent_revision}: {len(new)} new pairs, {len(replay)} replayed"
    )
    matches = match_targets(memory, [source for source, _ in train], other_than_itself=True)
    values = parent.hyperparameters.values.given() if parent.hyperparameters is not None else {}
    steps = min(
        options.max_steps,
        max(MIN_STEPS, math.ceil(PASSES * len(train) / values.get("batch_size", options.batch_size))),
    )
    tuned = options.model_copy(update={**values, "max_steps": steps})
    span = TRAIN_END - TRAIN_START

    def on_step(step: int, total: int, loss: float, lr: float) -> None:
        report(TRAIN_START + span * step / total, f"training step {step}/{total}, loss {loss:.3f}")
        if on_train_step is not None:
            on_train_step(step, total, loss, lr)

    started = time.monotonic()
    out_hf = work / "hf"
    result = finetune(
        hf_dir,
        out_hf,
        train,
        source_language,
        target_language,
        previously_added=parent.added_language_codes,
        max_steps=tuned.max_steps,
        time_budget_s=tuned.time_budget_s,
        lr=tuned.learning_rate,
        batch_size=tuned.batch_size,
        gradient_accumulation=tuned.gradient_accumulation,
        max_length=tuned.max_length,
        lr_schedule=tuned.lr_schedule,
        warmup_steps=0,
        freeze=tuned.freeze,
        seed=tuned.seed,
        matches=matches,
        progress=on_step,
        should_cancel=should_cancel,
    )
    report(TRAIN_END, f"trained {result.steps} steps in {result.seconds:.0f} s on {result.device}")
    ct2_dir = convert_to_ctranslate2(out_hf, work / "ct2", quantization=parent.quantization)
    memory.write(ct2_dir / MEMORY_FILE)
    manifest = parent.model_copy(
        update={
            "revision": revision,
            "build_id": build_id,
            "files": [],
            "created_at": datetime.now(UTC),
            "scores": {},
            "added_language_codes": result.added_language_codes,
            "languages": list(dict.fromkeys([*parent.languages, *result.added_language_codes])),
            "max_positions": checkpoint_max_positions(out_hf),
            "training": {
                "steps": result.steps,
                "seconds": round(result.seconds, 2),
                "steps_per_second": round(result.steps / result.seconds, 2) if result.seconds else 0.0,
                "stopped_by_budget": float(result.stopped_by_budget),
                "micro_build_of": float(micro.parent_revision),
                "new_pairs": float(len(new)),
                "replayed_pairs": float(len(replay)),
            },
        }
    )
    trained = TrainedModel(
        manifest=manifest,
        ct2_dir=ct2_dir,
        hf_dir=out_hf,
        train_pairs=len(pairs),
        eval_pairs=0,
        steps=result.steps,
        seconds=time.monotonic() - started,
    )
    return trained, parent
