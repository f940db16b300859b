"""A build job's side of ClearML, in the SDK's real offline mode.

The job runs in a child process, as it does under an agent, so the SDK's process-wide state
(its main task, exit hooks, offline switch) never touches the test process; the offline session
goes to a folder in tmp_path (CLEARML_CACHE_DIR, and HOME points there too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from build_jobs.clearml_task import PROGRESS_SERIES, PROGRESS_TITLE, ClearMLTask
from tests.helpers import REPO, free_port

JOB = textwrap.dedent(
    """
    from build_jobs.clearml_task import ClearMLTask

    task = ClearMLTask.attach("offline test build")
    assert task is not None and task.offline
    task.progress(0.25, "training", train_step=5, train_step_count=20)
    task.progress(0.30, "training", train_step=6, train_step_count=20)  # throttled, sent by close()
    task.scalar("loss", "train", 2.5, 5)
    task.scalar("learning_rate", "train", 1e-4, 5)
    task.scalar("chrF", "after", 41.5, 20)
    assert task.stopped() is False
    task.close()
    print("task id:", task.task_id)
    """
)


@pytest.mark.timeout(120)
def test_offline_session_records_progress_scalars_and_user_properties(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    # Reporting from a thread rather than the SDK's default subprocess: same records, and the
    # process exits in about a second instead of ten.
    (tmp_path / "clearml.conf").write_text("sdk { development { report_use_subprocess: false } }\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARML_", "TRAINS_"))}
    env |= {
        "HOME": str(tmp_path),
        "CLEARML_OFFLINE_MODE": "1",
        "CLEARML_CACHE_DIR": str(tmp_path / "cache"),
        "CLEARML_CONFIG_FILE": str(tmp_path / "clearml.conf"),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "job.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [task_id] = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("task id: ")]
    session = tmp_path / "cache" / "offline" / task_id

    scalars = _scalars(session / "metrics.jsonl")
    assert scalars[("loss", "train")] == [(5, 2.5)]
    assert scalars[("learning_rate", "train")] == [(5, 1e-4)]
    assert scalars[("chrF", "after")] == [(20, 41.5)]
    assert [value for _, value in scalars[(PROGRESS_TITLE, PROGRESS_SERIES)]] == [25.0, 30.0]

    task = json.loads((session / "task.json").read_text())
    properties = {name: p["value"] for name, p in task["hyperparams"]["properties"].items()}
    assert properties == {"message": "training", "train_step": "6", "train_step_count": "20"}
    assert task["name"] == "offline test build"


def _scalars(path: Path) -> dict[tuple[str, str], list[tuple[int, float]]]:
    found: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for line in path.read_text().splitlines():
        for event in json.loads(line):
            if event.get("type") == "training_stats_scalar":
                found.setdefault((event["metric"], event["variant"]), []).append(
                    (event["iter"], event["value"])
                )
    return found


def test_attach_returns_none_outside_clearml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLEARML_TASK_ID", raising=False)
    monkeypatch.delenv("CLEARML_OFFLINE_MODE", raising=False)
    assert ClearMLTask.attach() is None
    monkeypatch.setenv("CLEARML_OFFLINE_MODE", "0")
    assert ClearMLTask.attach() is None


class BrokenTask:
    """An SDK task whose every call fails, as when the server goes away mid-build."""

    id = "task-1"

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("ClearML server gone")

        return fail


def test_sdk_errors_never_fail_the_build() -> None:
    task = ClearMLTask(BrokenTask(), offline=False)
    task.progress(0.5, "training", 1, 2)
    task.scalar("loss", "train", 1.0, 1)
    assert task.stopped() is False
    task.close()


class StatusTask:
    id = "task-1"

    def __init__(self) -> None:
        self.status = ("in_progress", "")
        self.checks = 0

    def get_status_message(self) -> tuple[str, str]:
        self.checks += 1
        return self.status


def test_stopped_asks_the_server_at_most_every_interval() -> None:
    now = [0.0]
    sdk_task = StatusTask()
    task = ClearMLTask(sdk_task, offline=False, stop_check_interval_s=10, clock=lambda: now[0])

    assert task.stopped() is False
    sdk_task.status = ("stopped", "aborted by a user")
    now[0] = 5
    assert task.stopped() is False, "asked again too soon"
    now[0] = 11
    assert task.stopped() is True
    assert task.stopped() is True
    assert sdk_task.checks == 2

    stopping = StatusTask()
    stopping.status = ("in_progress", "stopping")
    assert ClearMLTask(stopping, offline=False).stopped() is True
    assert ClearMLTask(StatusTask(), offline=True).stopped() is False


def _job(store: Path, api_port: int) -> list[str]:
    return [
        sys.executable, "-m", "build_jobs", "run",
        "--build-id", "b1", "--engine-id", "e1",
        "--source-language", "eng_Latn", "--target-language", "swh_Latn",
        "--revision", "1", "--no-train",
        "--store-url", store.as_uri(), "--api-address", f"127.0.0.1:{api_port}",
    ]  # fmt: skip


@pytest.mark.timeout(120)
def test_a_job_without_a_token_in_its_environment_takes_it_from_the_store(tmp_path: Path) -> None:
    """How a job on a ClearML agent gets its token: not from the task (whoever sees the task sees
    its arguments), but from the model store, once."""
    from serval_common.jobs import hand_over_job_token
    from serval_common.store import open_store

    store_dir = tmp_path / "store"
    store = open_store(store_dir.as_uri())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARML_", "TRAINS_", "SERVAL_"))}
    env |= {"SERVAL_HOME": str(tmp_path), "SERVAL_JOBS__REPORT_RETRY_S": "0.5"}

    missing = subprocess.run(
        _job(store_dir, free_port()), cwd=REPO, env=env, capture_output=True, text=True, timeout=100
    )
    assert missing.returncode == 2, missing.stderr[-2000:]
    assert "no job token" in missing.stderr

    hand_over_job_token(store, "b1", "job-token-from-the-store")
    taken = subprocess.run(
        _job(store_dir, free_port()), cwd=REPO, env=env, capture_output=True, text=True, timeout=100
    )
    assert "no job token" not in taken.stderr, taken.stderr[-2000:]
    assert store.list_keys("builds/b1") == [], "the job deleted its token as it read it"
    assert "job-token-from-the-store" not in taken.stdout + taken.stderr
