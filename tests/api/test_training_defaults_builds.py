"""Training defaults and worse fine-tunes, end to end: a real API service in process, real build
jobs (`run_build`) fine-tuning the session's tiny model for a few steps, a real local model store.

The tiny model's manifest carries its own learning rate (1e-3, from its checkpoint folder); the
deployment's `jobs.learning_rate` beats it; a build's `learningRate` beats both; the build's
`executionData` shows which was used (`CONFIG-1004`). A huge rate makes the held-out chrF worse:
the build says so (message, `warnings`, `MODEL-1001`) and is published by default, and faults
without publishing when `jobs.publish_worse_models` is off."""

from __future__ import annotations

import json
from typing import Any

from serval_common.settings import JobSettings, Settings
from tests.api.test_build_revisions import Builds, builds, parallel_corpus, training

__all__ = ["builds"]  # the fixture, used by name

WORSE = "Fine-tuning made the held-out chrF worse"
HUGE_RATE = 1.0
"""AdamW steps of this size wreck the tiny model within a few steps (seed 0, every run)."""


def diagnostic(build: dict[str, Any], code: str) -> dict[str, Any]:
    found = [d for d in build["executionData"]["diagnostics"] if d["code"] == code]
    assert len(found) == 1, build["executionData"]
    return found[0]


def run(builds: Builds, corpus_id: str, jobs: JobSettings, **options: Any) -> dict[str, Any]:
    """One training build whose job runs with the deployment settings `jobs`; `modelRevision`
    added: the revision it was given."""
    build, spec = builds.start(training(corpus_id, **options))
    builds.settings = Settings(home=builds.settings.home, jobs=jobs)
    builds.run_job(spec)
    return {**builds.build(build["id"]), "modelRevision": spec.revision}


def test_defaults_precedence_and_a_worse_fine_tune(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)

    # 1. Nothing set but the base model's manifest: its learning rate reaches the job.
    first = run(builds, corpus_id, JobSettings(report_retry_s=5))
    assert first["state"] == "Completed", first
    used = diagnostic(first, "CONFIG-1004")
    assert used["severity"] == "Info"
    assert (used["data"]["learningRate"], used["data"]["sources"]["learningRate"]) == (1e-3, "baseModel")
    assert (used["data"]["maxSteps"], used["data"]["sources"]["maxSteps"]) == (2, "buildOptions")
    assert (used["data"]["batchSize"], used["data"]["sources"]["batchSize"]) == (16, "default")
    assert "learningRate 0.001 (base model default)" in used["message"]
    manifest = json.loads(
        builds.store.read_bytes(f"models/{builds.engine_id}/{first['modelRevision']}/manifest.json")
    )
    assert manifest["hyperparameters"]["values"]["learning_rate"] == 1e-3

    # 2. The deployment's rate beats the base model's; this one is huge, so chrF drops, and the
    # default policy publishes the model and says so.
    worse = run(builds, corpus_id, JobSettings(report_retry_s=5, learning_rate=HUGE_RATE), maxSteps=4)
    assert worse["state"] == "Completed", worse
    used = diagnostic(worse, "CONFIG-1004")
    assert (used["data"]["learningRate"], used["data"]["sources"]["learningRate"]) == (
        HUGE_RATE,
        "deployment",
    )
    assert WORSE in worse["message"] and "it was published all the same" in worse["message"], worse["message"]
    dropped = diagnostic(worse, "MODEL-1001")
    assert dropped["severity"] == "Warn" and dropped["data"]["published"] is True
    assert dropped["data"]["chrfAfter"] < dropped["data"]["chrfBefore"]
    assert dropped["message"] in worse["executionData"]["warnings"], "for clients that read only warnings"
    assert builds.engine()["modelRevision"] == worse["modelRevision"]

    # 3. A build's own rate beats the deployment's (a sane 1e-4 there); with publishing worse models
    # off, the worse model is refused: the build faults and the engine keeps the revision it had.
    refusing = JobSettings(report_retry_s=5, learning_rate=1e-4, publish_worse_models=False)
    refused = run(builds, corpus_id, refusing, maxSteps=4, learningRate=HUGE_RATE)
    assert refused["state"] == "Faulted", refused
    assert WORSE in refused["message"] and "so it was not published" in refused["message"], refused["message"]
    assert f"this build used {HUGE_RATE:g})" in refused["message"], "the build's rate, not the deployment's"
    assert diagnostic(refused, "BUILD-1001")["message"] == refused["message"]
    assert builds.engine()["modelRevision"] == worse["modelRevision"]
    assert not any(
        key.startswith(f"models/{builds.engine_id}/{refused['modelRevision']}/") for key in builds.models()
    )
