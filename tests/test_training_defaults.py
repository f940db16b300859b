"""Where a fine-tune's hyperparameters come from: the build's options, else the deployment's
settings (`SERVAL_JOBS__…`), else the base model manifest's `training_defaults`, else the code's
defaults (meant for a real NLLB-200); and the rule and words for a fine-tune that lowered chrF.
Fast: no model is trained here (tests/api/test_training_defaults_builds.py trains)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from build_jobs.publish import TRAINING_DEFAULTS_FILE, checkpoint_training_defaults
from serval_api.builds.local import job_environment
from serval_common.build_options import BuildOptionsError, NmtBuildOptions, TrainingDefaults
from serval_common.fine_tune_scores import chrf_worse, worse_sentence
from serval_common.jobs import JobSpec
from serval_common.manifest import Manifest
from serval_common.settings import JobSettings, Settings

BASE_MODEL = TrainingDefaults(learning_rate=1e-3, warmup_steps=3, batch_size=4)
DEPLOYMENT = TrainingDefaults(learning_rate=2e-4, batch_size=8, max_steps=7)


def test_each_value_comes_from_the_highest_layer_that_sets_it() -> None:
    training = NmtBuildOptions.parse('{"maxSteps": 5}').training(DEPLOYMENT, BASE_MODEL)
    values, sources = training.values, training.sources

    assert (values.max_steps, sources["max_steps"]) == (5, "buildOptions"), "the build beats the deployment"
    assert (values.learning_rate, sources["learning_rate"]) == (2e-4, "deployment"), "beats the base model"
    assert (values.batch_size, sources["batch_size"]) == (8, "deployment")
    assert (values.warmup_steps, sources["warmup_steps"]) == (3, "baseModel"), "beats the code"
    assert (values.lr_schedule, sources["lr_schedule"]) == ("constant", "default")
    assert set(sources) == set(TrainingDefaults.model_fields), "every hyperparameter is accounted for"


def test_the_code_default_learning_rate_suits_a_real_nllb_200() -> None:
    training = NmtBuildOptions().training()
    assert (training.values.learning_rate, training.sources["learning_rate"]) == (1e-4, "default")
    assert set(training.sources.values()) == {"default"}


def test_an_option_equal_to_the_code_default_is_still_the_builds() -> None:
    training = NmtBuildOptions.parse('{"learningRate": 0.0001}').training(None, BASE_MODEL)
    assert (training.values.learning_rate, training.sources["learning_rate"]) == (1e-4, "buildOptions")


def test_what_a_build_reports_uses_the_option_names() -> None:
    training = NmtBuildOptions.parse('{"maxSteps": 5, "freeze": ["encoder"]}').training(
        DEPLOYMENT, BASE_MODEL
    )
    wire = training.wire()
    assert wire["learningRate"] == 2e-4 and wire["freeze"] == ["encoder"]
    assert wire["sources"]["learningRate"] == "deployment"
    assert wire["sources"]["warmupSteps"] == "baseModel"
    text = training.describe()
    assert "maxSteps 5 (build option)" in text
    assert "learningRate 0.0002 (deployment setting)" in text
    assert "warmupSteps 3 (base model default)" in text
    assert 'freeze ["encoder"] (build option)' in text


def test_deployment_settings_are_unset_by_default_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().jobs.training_defaults().given() == {}
    assert Settings().jobs.publish_worse_models is True
    monkeypatch.setenv("SERVAL_JOBS__LEARNING_RATE", "0.0002")
    monkeypatch.setenv("SERVAL_JOBS__FREEZE", '["embeddings"]')
    monkeypatch.setenv("SERVAL_JOBS__LR_SCHEDULE", "cosine")
    monkeypatch.setenv("SERVAL_JOBS__PUBLISH_WORSE_MODELS", "false")
    jobs = Settings().jobs
    assert jobs.training_defaults().given() == {
        "learning_rate": 2e-4,
        "freeze": ["embeddings"],
        "lr_schedule": "cosine",
    }
    assert jobs.publish_worse_models is False
    monkeypatch.setenv("SERVAL_JOBS__LEARNING_RATE", "3")
    with pytest.raises(ValidationError, match="learning_rate"):
        Settings()


def test_a_local_job_gets_the_deployments_training_settings(tmp_path: Path) -> None:
    spec = JobSpec("b1", "e1", "eng_Latn", "swh_Latn", 1, True, "{}", "file:///s", "127.0.0.1:1", "t")
    plain = job_environment(Settings(home=tmp_path), spec, parent={})
    assert not any(name.startswith("SERVAL_JOBS__LEARNING") for name in plain)
    assert "SERVAL_JOBS__PUBLISH_WORSE_MODELS" not in plain, "only what the operator set"

    jobs = JobSettings(learning_rate=2e-4, freeze=["encoder"], publish_worse_models=False)
    environment = job_environment(Settings(home=tmp_path, jobs=jobs), spec, parent={})
    assert environment["SERVAL_JOBS__LEARNING_RATE"] == "0.0002"
    assert environment["SERVAL_JOBS__FREEZE"] == '["encoder"]'
    assert environment["SERVAL_JOBS__PUBLISH_WORSE_MODELS"] == "false"
    # What the job reads back from that environment is what the API service was told.
    received = {k.removeprefix("SERVAL_JOBS__").lower(): v for k, v in environment.items() if "JOBS__" in k}
    job_side = JobSettings.model_validate(
        {k: json.loads(v) if k == "freeze" else v for k, v in received.items()}
    )
    assert job_side.training_defaults() == jobs.training_defaults()
    assert job_side.publish_worse_models is False


def test_base_model_training_defaults_are_checked_and_kept_in_its_manifest(tmp_path: Path) -> None:
    defaults = TrainingDefaults.checked(learning_rate=1e-4, max_steps=None, batch_size=8)
    assert defaults.given() == {"learning_rate": 1e-4, "batch_size": 8}, "None: not set"
    with pytest.raises(BuildOptionsError, match="learning_rate"):
        TrainingDefaults.checked(learning_rate=2.0)
    with pytest.raises(BuildOptionsError, match="epochs"):
        TrainingDefaults.checked(epochs=3)

    manifest = Manifest(kind="base-model", name="m", languages=["eng_Latn"], training_defaults=defaults)
    again = Manifest.model_validate_json(manifest.model_dump_json())
    assert again.training_defaults == defaults
    older = json.loads(manifest.model_dump_json())
    del older["training_defaults"]
    assert Manifest.model_validate(older).training_defaults is None, "manifests written before it"

    assert checkpoint_training_defaults(tmp_path) is None
    (tmp_path / TRAINING_DEFAULTS_FILE).write_text('{"learning_rate": 0.001}')
    assert checkpoint_training_defaults(tmp_path) == TrainingDefaults(learning_rate=1e-3)


def test_a_drop_counts_as_builds_show_chrf_to_one_decimal() -> None:
    assert chrf_worse(5.4, 3.2)
    assert not chrf_worse(24.41, 24.38), "reads 24.4 → 24.4"
    assert not chrf_worse(3.2, 5.4)
    published = worse_sentence(5.4, 3.2, published=True, learning_rate=0.01)
    assert published.startswith("Fine-tuning made the held-out chrF worse (5.4 → 3.2); it was published")
    refused = worse_sentence(5.4, 3.2, published=False, learning_rate=0.01)
    assert "(5.4 → 3.2), so it was not published and the engine keeps the model it had" in refused
    assert "lower learningRate (this build used 0.01)" in refused
