"""Training a Thot phrase-based model (the `smt-transfer` family) into a model folder
(`serval_common.thot_smt` describes the folder).

The pairs are tokenized with sil-machine's Latin word tokenizer and lowercased, then
`ThotSmtModelTrainer` trains HMM word alignments both ways, the phrase table and a trigram language
model; it sets 10% of the pairs (at most 1,000) aside to tune weights, and learns them
incrementally afterwards. A unigram truecaser learns the target side's casing. The held-out pairs
score the model (chrF, after truecasing and sentence-start capitalisation).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from machine.corpora import ParallelTextCorpus, ParallelTextRow
from machine.optimization import NelderMeadSimplex
from machine.translation import TrainStats, UnigramTruecaser
from machine.translation.evaluation import compute_bleu
from machine.translation.thot import ThotSmtModelTrainer, ThotSmtParameters
from machine.translation.thot.parameter_tuner import ParameterTuner
from machine.translation.thot.thot_utils import (
    load_smt_decoder,
    load_smt_model,
    to_sentence,
    to_target_tokens,
)
from machine.utils import ProgressStatus

from build_jobs.data import Corpus
from build_jobs.progress import Canceled
from serval_common.smt_build_options import SmtBuildOptions
from serval_common.thot_smt import (
    DEFAULT_WEIGHTS,
    LM_PREFIX,
    TM_PREFIX,
    SmtFolder,
    final_text,
    load_engine,
    tokenizer,
)

log = logging.getLogger(__name__)

Phase = Callable[[float, str], None]
"""(fraction of training done, what is happening)"""


@dataclass(frozen=True)
class TrainedSmt:
    folder: Path
    train_pairs: int
    eval_pairs: int
    tuning_evaluations: int
    seconds: float
    chrf: float
    """held-out chrF of the translations as the engine answers them (capitalised at a sentence's
    start only with `capitalizeSentenceStart`)"""
    chrf_truecaser_only: float
    """held-out chrF with the truecaser's output as is"""


class _Stop(Exception):
    """The tuning budget (evaluations or time) is spent."""


class BoundedWeightTuner(ParameterTuner):
    """Tunes Thot's log-linear weights for BLEU on (a sample of) the tuning pairs with sil-machine's
    Nelder–Mead search, bounded by evaluations (each one translates the sample once; the search
    spends 8 on its first simplex, so fewer only picks the best of those) and a deadline. The best
    weights seen are kept when the budget cuts the search short; with no budget the default
    weights stay."""

    def __init__(
        self,
        word_alignment_model: str,
        *,
        evaluations: int,
        max_pairs: int,
        deadline: float,
        seed: int,
        should_cancel: Callable[[], bool],
    ) -> None:
        self.word_alignment_model = word_alignment_model
        self.evaluations = evaluations
        self.max_pairs = max_pairs
        self.deadline = deadline
        self.seed = seed
        self.should_cancel = should_cancel
        self.evaluated = 0

    def tune(
        self,
        parameters: ThotSmtParameters,
        tune_source_corpus: Sequence[Sequence[str]],
        tune_target_corpus: Sequence[Sequence[str]],
        stats: TrainStats,
        progress: Callable[[ProgressStatus], None],  # type: ignore[override]
    ) -> ThotSmtParameters:
        tuned = parameters.copy()
        tuned.model_weights = list(DEFAULT_WEIGHTS)
        if self.evaluations == 0 or time.monotonic() >= self.deadline or not tune_source_corpus:
            return tuned
        order = list(range(len(tune_source_corpus)))
        random.Random(self.seed).shuffle(order)
        chosen = sorted(order[: self.max_pairs])
        sources = [tune_source_corpus[i] for i in chosen]
        references = [tune_target_corpus[i] for i in chosen]
        length_weight = DEFAULT_WEIGHTS[-1]
        best: tuple[float, list[float]] = (float("inf"), list(DEFAULT_WEIGHTS))

        def error(weights: np.ndarray, _: int) -> float:
            nonlocal best
            if self.should_cancel():
                raise Canceled("the build was canceled while tuning")
            if self.evaluated >= self.evaluations or time.monotonic() >= self.deadline:
                raise _Stop
            candidate = parameters.copy()
            candidate.model_weights = [*weights.tolist(), length_weight]
            value = 1.0 - _bleu(self.word_alignment_model, candidate, sources, references)
            # A negative weight on a probability feature rewards unlikely hypotheses.
            value += sum(-w for i, w in enumerate(weights.tolist()) if w < 0 and i not in (0, 2))
            self.evaluated += 1
            progress(ProgressStatus.from_step(self.evaluated, self.evaluations))
            if value < best[0]:
                best = (value, list(candidate.model_weights))
            return value

        search = NelderMeadSimplex(0.001, self.evaluations, 1.0)
        try:
            search.find_minimum(error, list(DEFAULT_WEIGHTS[:-1]))
        except _Stop:
            log.info("weight tuning stopped by its budget", extra={"evaluations": self.evaluated})
        stats.metrics["bleu"] = 1.0 - best[0]
        tuned.model_weights = best[1]
        return tuned


def _bleu(
    word_alignment_model: str,
    parameters: ThotSmtParameters,
    sources: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
) -> float:
    from machine.translation.thot import ThotWordAlignmentModelType

    model = load_smt_model(ThotWordAlignmentModelType[word_alignment_model.upper()], parameters)
    decoder = load_smt_decoder(model, parameters)
    try:
        translations = decoder.translate_batch([to_sentence(s) for s in sources])
        return compute_bleu([to_target_tokens(t.target) for t in translations], references)
    finally:
        decoder.clear()
        model.clear()


def normalize(text: str) -> list[str]:
    """The model's view of a segment: Latin word tokens, lowercased."""
    return [token.lower() for token in tokenizer().tokenize(text)]


def train_smt(
    corpus: Corpus,
    options: SmtBuildOptions,
    folder: Path,
    *,
    phase: Phase,
    should_cancel: Callable[[], bool],
) -> TrainedSmt:
    """Train into `folder` (created) and score on the held-out pairs. Raises `Canceled` when
    `should_cancel` turns true (checked between and within Thot's steps)."""
    started = time.monotonic()
    settings = SmtFolder(capitalize_sentence_start=options.capitalize_sentence_start)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TM_PREFIX).parent.mkdir(exist_ok=True)
    (folder / LM_PREFIX).parent.mkdir(exist_ok=True)
    settings.write(folder)

    pairs = corpus.train[: options.max_segments]
    word = tokenizer()
    rows = []
    casing = UnigramTruecaser()
    for i, (source, target) in enumerate(pairs):
        target_tokens = list(word.tokenize(target))
        casing.train_segment(target_tokens, True)
        rows.append(
            ParallelTextRow(
                "train",
                [i],
                [i],
                [t.lower() for t in word.tokenize(source)],
                [t.lower() for t in target_tokens],
            )
        )
    assert settings.truecaser is not None
    casing.save(folder / settings.truecaser)

    def check_canceled() -> None:
        if should_cancel():
            raise Canceled("the build was canceled while training")

    def report(status: ProgressStatus) -> None:
        fraction = status.percent_completed or 0.0
        phase(fraction, f"training: {status.message or 'Thot'} ({fraction:.0%})")

    tuner = BoundedWeightTuner(
        settings.word_alignment_model,
        evaluations=options.tuning_evaluations,
        max_pairs=options.max_tuning_pairs,
        deadline=started + options.time_budget_s,
        seed=options.seed,
        should_cancel=should_cancel,
    )
    trainer = ThotSmtModelTrainer(
        settings.word_alignment_model, ParallelTextCorpus.from_parallel_rows(rows), folder / settings.config
    )
    # sil-machine 1.9.2 has no public hook for the weight tuner (its own default runs up to 100
    # evaluations of the whole tuning set: hours on 2 cores); this bounded one replaces it.
    trainer._model_weight_tuner = tuner  # type: ignore[assignment]
    trainer.seed = options.seed
    try:
        trainer.train(report, check_canceled)
        check_canceled()
        trainer.save()
    finally:
        trainer.close()
    settings.decoder.weights = list(trainer.parameters.model_weights)
    settings.write(folder)
    for by_product in [*folder.glob("tm/*.A3.final"), *folder.glob("tm/*.bestal")]:
        by_product.unlink()  # the trainer's intermediate alignments: serving never reads them
    seconds = time.monotonic() - started

    phase(1.0, f"scoring {len(corpus.evaluation[: options.max_eval_pairs])} held-out pairs")
    capitalized, plain = score(folder, corpus.evaluation[: options.max_eval_pairs])
    chrf = capitalized if options.capitalize_sentence_start else plain
    log.info(
        "thot smt model trained",
        extra={
            "pairs": len(rows),
            "seconds": round(seconds, 1),
            "tuning_evaluations": tuner.evaluated,
            "chrf": round(chrf, 2),
        },
    )
    return TrainedSmt(
        folder=folder,
        train_pairs=len(rows),
        eval_pairs=len(corpus.evaluation[: options.max_eval_pairs]),
        tuning_evaluations=tuner.evaluated,
        seconds=seconds,
        chrf=chrf,
        chrf_truecaser_only=plain,
    )


def score(folder: Path, pairs: list[tuple[str, str]]) -> tuple[float, float]:
    """Held-out chrF with and without sentence-start capitalisation."""
    import sacrebleu

    if not pairs:
        return 0.0, 0.0
    engine = load_engine(folder)
    try:
        results = engine.translate_batch([source for source, _ in pairs])
    finally:
        engine.close()
    detok = engine.target_detokenizer
    references = [[target for _, target in pairs]]
    fixed = [final_text(r, detok) for r in results]
    plain = [detok.detokenize(r.target_tokens) for r in results]
    return (
        float(sacrebleu.corpus_chrf(fixed, references).score),
        float(sacrebleu.corpus_chrf(plain, references).score),
    )
