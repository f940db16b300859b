"""The bounded weight tuner of `smt-transfer` builds: no budget, no search (the search itself runs
in tests/api/test_smt_build_job.py, inside a real build)."""

from __future__ import annotations

import time

from machine.translation import TrainStats
from machine.translation.thot import ThotSmtParameters

from build_jobs.smt.train import BoundedWeightTuner
from serval_common.thot_smt import DEFAULT_WEIGHTS

PAIRS = [["in", "the", "beginning"], ["god", "created"]], [["hapo", "mwanzo"], ["mungu", "aliumba"]]


def tuner(evaluations: int, deadline: float) -> BoundedWeightTuner:
    return BoundedWeightTuner(
        "hmm", evaluations=evaluations, max_pairs=10, deadline=deadline, seed=0, should_cancel=lambda: False
    )


def test_no_evaluations_keep_the_default_weights_without_decoding() -> None:
    parameters = ThotSmtParameters(translation_model_filename_prefix="/nonexistent/tm")
    parameters.model_weights = [1.0] * 7 + [0.0]
    bounded = tuner(0, time.monotonic() + 60)
    tuned = bounded.tune(parameters, *PAIRS, TrainStats(), lambda _status: None)
    assert list(tuned.model_weights) == list(DEFAULT_WEIGHTS)
    assert bounded.evaluated == 0
    assert tuned.translation_model_filename_prefix == "/nonexistent/tm"


def test_a_spent_time_budget_skips_tuning_however_many_evaluations_were_asked() -> None:
    parameters = ThotSmtParameters(translation_model_filename_prefix="/nonexistent/tm")
    bounded = tuner(50, time.monotonic() - 1)
    tuned = bounded.tune(parameters, *PAIRS, TrainStats(), lambda _status: None)
    assert list(tuned.model_weights) == list(DEFAULT_WEIGHTS)
    assert bounded.evaluated == 0
