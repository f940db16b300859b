"""Build options of `smt-transfer` engines (Thot phrase-based SMT).

What a build costs on 2 CPU cores (7,644 English→Swahili verse pairs, 200 held out): about 4 min to
train without weight tuning (issue 15's probe on a quiet machine; 26 min here with other work on
both cores). Each tuning evaluation translates the tuning sample once (≈ 0.15 s a pair). Measured
by `bench/smt.py train`: held-out chrF 40.99 untuned, 41.28 with 10 evaluations on 200 pairs (the
probe's 12 evaluations on all 764 tuning pairs took 18 min for 42.8 with its own recipe). Tuning
is therefore off by default, and bounded three ways when asked for: evaluations, tuning pairs and
the build's time budget.
"""

from __future__ import annotations

from pydantic import Field

from serval_common.build_options import JobOptions


class SmtBuildOptions(JobOptions):
    """See docs/engine-families.md."""

    tuning_evaluations: int = Field(
        default=0,
        alias="tuningEvaluations",
        ge=0,
        le=1000,
        description="evaluations of the Nelder–Mead search over Thot's model weights (each "
        "translates the tuning pairs once); 0 keeps the default weights and skips tuning",
    )
    max_tuning_pairs: int = Field(
        default=200,
        alias="maxTuningPairs",
        ge=1,
        le=10000,
        description="tuning translates at most this many of the pairs Thot's trainer sets aside "
        "for tuning (10% of the corpus, at most 1,000)",
    )
    time_budget_s: float = Field(
        default=3600,
        alias="timeBudgetS",
        gt=0,
        description="weight tuning stops at the best weights found so far once training has "
        "taken this many seconds",
    )
    eval_share: float = Field(
        default=0.02,
        alias="evalShare",
        ge=0,
        lt=1,
        description="share of pairs held out to score the model (chrF; at least one pair, at "
        "most maxEvalPairs)",
    )
    max_eval_pairs: int = Field(
        default=200, alias="maxEvalPairs", ge=1, le=10000, description="held-out pairs at most"
    )
    max_segments: int = Field(
        default=100_000,
        alias="maxSegments",
        ge=2,
        description="training pairs at most (the first ones of the corpus); bounds training time "
        "and model size",
    )
    seed: int = Field(default=0, description="seeds the held-out split and the tuning sample")
    capitalize_sentence_start: bool = Field(
        default=False,
        alias="capitalizeSentenceStart",
        description="capitalise the first word of a segment that starts a sentence when the "
        "truecaser leaves it lowercase; off: the first word as the model gives it, as Serval answers",
    )
