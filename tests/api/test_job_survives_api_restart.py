"""A build job outlives its API service: a real training job (a `python -m build_jobs run`
process, as a ClearML agent would run it on another machine) keeps retrying its platform reports
while the API service restarts on the same address and database, and its build completes. A
refused job token is not retried, and a re-sent pretranslation stream stores no duplicates."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from build_jobs.report import PlatformReporter, RetryPolicy
from serval_api.auth import ALL_SCOPES
from serval_common.settings import ApiSettings, Settings
from serval_common.store import open_store
from tests.api.conftest import RecordingLauncher, RunningApi, create_engine
from tests.api.test_pretranslations import many_rows, start_build, stored_rows, text_engine
from tests.e2e.test_build_lifecycle import start_training
from tests.helpers import REPO, free_port, publish_tiny_base_model

STEPS = 60
DOWN_S = 60.0
"""The longest the API service stays down while the job trains: until the job has retried a report
(the job reports every ten steps, and ten steps on a loaded machine may take many seconds), so the test never depends
on how fast the job trains."""


@pytest.mark.timeout(120)
@pytest.mark.sqlite_pass_only
def test_training_job_survives_an_api_service_restart(
    tmp_path: Path, database_url: str, tiny_ct2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def follows_again(_self: RecordingLauncher, _build_id: str, _job_ref: str) -> bool:
        return True

    # As the ClearML launcher does for a task still running: the restarted API service follows
    # the job again instead of restarting the build with a new job token.
    monkeypatch.setattr(RecordingLauncher, "resume", follows_again)
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=free_port(), rest_port=free_port()),
    )
    publish_tiny_base_model(open_store(settings.resolved_store_url), tiny_ct2_model, "tiny-nllb")
    api: RunningApi | None = RunningApi(settings)
    job: subprocess.Popen[bytes] | None = None
    job_log = tmp_path / "job.log"
    try:
        assert api is not None
        with api.client(scopes=ALL_SCOPES) as client:
            engine_id, build_id = start_training_build(client)
        spec = api.launcher.specs[-1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARML_", "TRAINS_"))}
        env |= {**spec.environment(), "SERVAL_HOME": str(tmp_path), "SERVAL_JOBS__REPORT_RETRY_S": "60"}
        with job_log.open("wb") as out:
            job = subprocess.Popen(
                [sys.executable, "-m", "build_jobs", *spec.command_args()],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

        with api.client(scopes=ALL_SCOPES) as client:
            wait_for_training(client, engine_id, build_id, job, job_log)
        api.close()
        api = None
        wait_for_a_retried_report(job, job_log)
        assert job.poll() is None, "the job must outlive the API service: " + job_log.read_text()[-3000:]
        api = RunningApi(settings)
        assert api.grpc_target == spec.api_address, "restarted on the same address"

        assert job.wait(timeout=90) == 0, job_log.read_text()[-3000:]
        with api.client(scopes=ALL_SCOPES) as client:
            done = client.get(f"/translation/engines/{engine_id}/builds/{build_id}").json()
            current = client.get(f"/translation/engines/{engine_id}").json()
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait(10)
        if api is not None:
            api.close()

    assert done["state"] == "Completed", done
    assert done["message"].startswith(f"published revision 1: trained {STEPS} steps"), done["message"]
    assert [(p["stage"], p["step"], p["stepCount"]) for p in done["phases"]] == [("Train", STEPS, STEPS)]
    assert current["modelRevision"] == 1
    assert (tmp_path / "store" / "models" / engine_id / "1" / "manifest.json").is_file()
    lines = job_log.read_text().splitlines()
    retried = [line for line in lines if "platform call failed; retrying" in line]
    recovered = [line for line in lines if "platform call succeeded after retries" in line]
    assert retried and all(f"build_id={build_id}" in line and "code=UNAVAILABLE" in line for line in retried)
    assert recovered, "\n".join(lines[-40:])


def wait_for_a_retried_report(job: subprocess.Popen[bytes], job_log: Path) -> None:
    deadline = time.monotonic() + DOWN_S
    while "platform call failed; retrying" not in job_log.read_text():
        assert job.poll() is None, "the job must outlive the API service: " + job_log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the job made no report while the API service was down"
        time.sleep(0.1)


def start_training_build(client: httpx.Client) -> tuple[str, str]:
    engine = create_engine(client)
    build = start_training(client, engine["id"], {"maxSteps": STEPS, "evalShare": 0.1})
    return engine["id"], build["id"]


def wait_for_training(
    client: httpx.Client, engine_id: str, build_id: str, job: subprocess.Popen[bytes], job_log: Path
) -> None:
    """Until the job has reported its first training steps."""
    deadline = time.monotonic() + 60
    while True:
        build: dict[str, Any] = client.get(f"/translation/engines/{engine_id}/builds/{build_id}").json()
        if any(p["stage"] == "Train" and p["step"] >= 1 for p in build.get("phases") or []):
            assert build["state"] == "Active" and build["step"] < STEPS, build
            return
        assert job.poll() is None, job_log.read_text()[-3000:]
        assert time.monotonic() < deadline, build
        time.sleep(0.05)


@pytest.mark.timeout(30)
def test_a_refused_job_token_is_not_retried(api: RunningApi, caplog: pytest.LogCaptureFixture) -> None:
    with api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client)
        build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    reporter = PlatformReporter(api.grpc_target, build["id"], "not-the-token", RetryPolicy(budget_s=20))
    began = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="build_jobs.report"), pytest.raises(grpc.RpcError) as e:
            reporter.started()
    finally:
        reporter.close()
    assert isinstance(e.value, grpc.Call) and e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert time.monotonic() - began < 2.0, "failed fast"
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


@pytest.mark.timeout(30)
def test_an_unreachable_api_service_is_retried_until_the_budget_is_spent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = RetryPolicy(budget_s=2.0, initial_backoff_s=0.1, max_backoff_s=0.4)
    reporter = PlatformReporter(f"127.0.0.1:{free_port()}", "build-x", "token", policy)
    began = time.monotonic()
    try:
        with caplog.at_level(logging.INFO, logger="build_jobs.report"), pytest.raises(grpc.RpcError) as e:
            reporter.progress(1, 0.5, "half way")
    finally:
        reporter.close()
    assert isinstance(e.value, grpc.Call) and e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert 1.5 < time.monotonic() - began < 5.0
    retries = [r for r in caplog.records if r.getMessage() == "platform call failed; retrying"]
    assert len(retries) >= 4 and all(r.__dict__["build_id"] == "build-x" for r in retries)
    assert [r.getMessage() for r in caplog.records][-1] == "platform call failed; retry budget spent"


@pytest.mark.timeout(30)
def test_a_resent_pretranslation_stream_replaces_the_builds_rows(api: RunningApi) -> None:
    """What a job's retry of InsertPretranslations looks like to the API service: the whole stream
    again, after an attempt that stored some batches (cut off) or all of them (answer lost)."""
    with api.client(scopes=ALL_SCOPES) as owner:
        engine_id, pc_id = text_engine(owner)
        job = start_build(api, owner, engine_id, pc_id)
    rows = many_rows(pc_id, 1200, "row")
    cut_off = [*rows[:700], {**rows[700], "confidence": 2.0}]
    with pytest.raises(grpc.RpcError):
        job.insert(cut_off)
    assert stored_rows(api, build_id=job.build_id) == 500, "the first batch was stored"
    assert job.insert(rows) == 1200
    assert job.insert(rows) == 1200
    assert stored_rows(api, build_id=job.build_id) == 1200
