"""A real training build job, run as its launcher would run it, reporting to a real API service
and — in the ClearML SDK's offline mode — to its ClearML task: progress, phases, execution data,
loss, learning rate and chrF."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from serval_api.auth import ALL_SCOPES
from serval_common.store import open_store
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.test_build_lifecycle import start_training
from tests.helpers import REPO, publish_tiny_base_model
from tests.test_clearml_job import _scalars

STEPS = 20


@pytest.mark.timeout(300)
@pytest.mark.sqlite_pass_only
def test_training_job_reports_to_the_api_service_and_its_clearml_task(
    api: RunningApi, tiny_ct2_model: Path, tmp_path: Path
) -> None:
    with api.client(scopes=ALL_SCOPES) as client:
        run_and_check(api, client, tiny_ct2_model, tmp_path)


def run_and_check(api: RunningApi, client: httpx.Client, tiny_ct2_model: Path, tmp_path: Path) -> None:
    settings = api.service.settings
    publish_tiny_base_model(open_store(settings.resolved_store_url), tiny_ct2_model, "tiny-nllb")
    engine = create_engine(client)
    build = start_training(client, engine["id"], {"maxSteps": STEPS, "evalShare": 0.1})
    spec = api.launcher.specs[-1]

    clearml = tmp_path / "clearml"
    clearml.mkdir()
    (clearml / "clearml.conf").write_text("sdk { development { report_use_subprocess: false } }\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARML_", "TRAINS_"))}
    env |= {
        **spec.environment(),
        "HOME": str(clearml),
        "CLEARML_OFFLINE_MODE": "1",
        "CLEARML_CACHE_DIR": str(clearml / "cache"),
        "CLEARML_CONFIG_FILE": str(clearml / "clearml.conf"),
        "SERVAL_HOME": str(settings.home),
    }
    job = subprocess.run(
        [sys.executable, "-m", "build_jobs", *spec.command_args()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]

    done = client.get(f"/translation/engines/{engine['id']}/builds/{build['id']}").json()
    assert done["state"] == "Completed", done
    assert [(p["stage"], p["step"], p["stepCount"]) for p in done["phases"]] == [("Train", STEPS, STEPS)]
    assert done["executionData"]["trainCount"] == 90

    [session] = [p for p in (clearml / "cache" / "offline").iterdir() if p.is_dir()]
    scalars = _scalars(session / "metrics.jsonl")
    assert [step for step, _ in scalars[("loss", "train")]] == [10, 20]
    assert [step for step, _ in scalars[("learning rate", "train")]] == [10, 20]
    assert [step for step, _ in scalars[("chrf", "before")]] == [0]
    assert scalars[("chrf", "after")] == [(STEPS, pytest.approx(done_chrf(settings.home, engine["id"])))]
    task = json.loads((session / "task.json").read_text())
    properties = {name: p["value"] for name, p in task["hyperparams"]["properties"].items()}
    assert (properties["train_step"], properties["train_step_count"]) == (str(STEPS), str(STEPS))
    assert properties["message"].startswith("published revision 1: trained 20 steps")
    assert task["name"] == f"serval build {build['id']}"


def done_chrf(home: Path, engine_id: str) -> float:
    manifest = json.loads((home / "store" / "models" / engine_id / "1" / "manifest.json").read_text())
    score: float = manifest["scores"]["chrf_after"]
    return score
