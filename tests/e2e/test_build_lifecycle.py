"""Build jobs as real child processes of a real API service: cancel mid-training over REST (and the
next build's new revision), the local queue and its depth, and an API service killed while a job
trains."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_common.settings import Settings
from serval_common.store import open_store
from tests.e2e.conftest import BASE_MODEL, Deployment, wait_for_build
from tests.e2e.test_training_build import corpus
from tests.helpers import free_port, publish_tiny_base_model, verse_pairs, wait_for_port

LONG_TRAINING = {"maxSteps": 100_000, "timeBudgetS": 600}


def nmt_engine(rest: httpx.Client) -> str:
    response = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    )
    assert response.status_code == 201, response.text
    engine_id: str = response.json()["id"]
    return engine_id


def start_training(rest: httpx.Client, engine_id: str, options: dict[str, Any]) -> dict[str, Any]:
    sources, targets = verse_pairs("engwebp", "swh1850", 400)
    pc = rest.post(
        f"/translation/engines/{engine_id}/parallel-corpora",
        json={
            "sourceCorpusIds": [corpus(rest, "en", sources[300:])],
            "targetCorpusIds": [corpus(rest, "sw", targets[300:])],
        },
    )
    assert pc.status_code == 201, pc.text
    response = rest.post(
        f"/translation/engines/{engine_id}/builds",
        json={"trainOn": [{"parallelCorpusId": pc.json()["id"]}], "options": options},
    )
    assert response.status_code == 201, response.text
    build: dict[str, Any] = response.json()
    return build


def wait_until_training(rest: httpx.Client, engine_id: str, build: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while "training step" not in (build.get("message") or ""):
        assert build["state"] in ("Pending", "Active"), build
        assert time.monotonic() < deadline, f"the job never reached training: {build}"
        poll = rest.get(
            f"/translation/engines/{engine_id}/builds/{build['id']}",
            params={"min-revision": build["revision"] + 1},
        )
        assert poll.status_code in (200, 408), poll.text
        build = poll.json() if poll.status_code == 200 else build
    return build


def job_processes(build_id: str) -> list[int]:
    """Pids of running build jobs for `build_id` (their command line names the build)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if b"build_jobs" in argv and build_id.encode() in argv and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.sqlite_pass_only
def test_cancel_during_training_publishes_nothing(deployment: Deployment) -> None:
    rest = deployment.rest
    engine_id = nmt_engine(rest)
    build = wait_until_training(rest, engine_id, start_training(rest, engine_id, LONG_TRAINING))
    assert build["state"] == "Active" and 0.15 <= build["progress"] < 0.85
    assert job_processes(build["id"]), "the job runs as a child process"

    canceled = rest.post(f"/translation/engines/{engine_id}/current-build/cancel")
    assert canceled.status_code == 200 and canceled.json()["state"] == "Canceled"
    wait_until(lambda: not job_processes(build["id"]), 30, "the canceled job kept running")

    after = rest.get(f"/translation/engines/{engine_id}/builds/{build['id']}").json()
    assert after["state"] == "Canceled"
    engine = rest.get(f"/translation/engines/{engine_id}").json()
    assert (engine["modelRevision"], engine["isBuilding"]) == (0, False)
    assert not (deployment.home / "store" / "models" / engine_id).exists(), "nothing is published"
    assert (
        rest.post(f"/translation/engines/{engine_id}/translate", json="In the beginning").status_code == 409
    )

    again = rest.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []})
    assert again.status_code == 201, again.text
    done = wait_for_build(rest, engine_id, again.json(), 120)
    assert done["state"] == "Completed", done
    assert rest.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 2, "revision 1 is burned"
    assert [p.name for p in (deployment.home / "store" / "models" / engine_id).iterdir()] == ["2"]


@contextmanager
def api_service(home: Path, database_url: str, env: dict[str, str]) -> Iterator[tuple[httpx.Client, Any]]:
    """An API service process on free ports with the given extra environment; yields a REST client
    and a handle whose `.process` can be killed and `.restart()`ed on the same ports."""
    grpc_port, rest_port = free_port(), free_port()
    api_key, _ = create_credentials(Settings(home=home, database_url=database_url), "lifecycle")
    full_env = {"SERVAL_DATABASE_URL": database_url, "SERVAL_API__INSTANCE_ID": "lifecycle", **env}

    class Handle:
        process: subprocess.Popen[bytes]
        starts = 0

        def restart(self) -> None:
            self.starts += 1
            self.process = processes.start(
                ["api", "--home", str(home), "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
                home / f"api-{self.starts}.log",
                full_env,
            )
            wait_for_port(rest_port, self.process)

    handle = Handle()
    handle.restart()
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{rest_port}/api/v1", headers={"X-API-Key": api_key}, timeout=60
        ) as rest:
            yield rest, handle
    finally:
        processes.stop(handle.process)
        for log in sorted(home.glob("api-*.log")):
            print(log.name, log.read_text()[-2000:])


@pytest.mark.sqlite_pass_only
def test_local_queue_reports_depth_and_runs_jobs_in_order(
    tmp_path: Path, tiny_ct2_model: Path, database_url: str
) -> None:
    publish_tiny_base_model(open_store((tmp_path / "store").as_uri()), tiny_ct2_model, BASE_MODEL)
    with api_service(tmp_path, database_url, {"SERVAL_JOBS__MAX_CONCURRENT": "1"}) as (rest, _):
        first = nmt_engine(rest)
        running = wait_until_training(rest, first, start_training(rest, first, LONG_TRAINING))
        waiting = []
        for _ in range(2):
            engine_id = nmt_engine(rest)
            build = rest.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []}).json()
            waiting.append((engine_id, build["id"]))
        depths = [
            rest.get(f"/translation/engines/{e}/builds/{b}").json().get("queueDepth") for e, b in waiting
        ]
        assert depths == [0, 1], "jobs ahead of each waiting build"
        assert rest.get("/translation/engine-types/nmt/queues").json()["size"] == 2

        assert rest.post(f"/translation/engines/{first}/current-build/cancel").status_code == 200
        finished = [
            wait_for_build(rest, e, rest.get(f"/translation/engines/{e}/builds/{b}").json(), 120)
            for e, b in waiting
        ]
        assert [b["state"] for b in finished] == ["Completed", "Completed"]
        assert finished[0]["dateFinished"] <= finished[1]["dateStarted"], "one job at a time, in order"
        assert rest.get(f"/translation/engines/{first}/builds/{running['id']}").json()["state"] == "Canceled"


@pytest.mark.sqlite_pass_only
def test_killed_api_service_restarts_the_build_it_was_running(
    tmp_path: Path, tiny_ct2_model: Path, database_url: str
) -> None:
    publish_tiny_base_model(open_store((tmp_path / "store").as_uri()), tiny_ct2_model, BASE_MODEL)
    with api_service(tmp_path, database_url, {}) as (rest, api):
        engine_id = nmt_engine(rest)
        build = wait_until_training(
            rest, engine_id, start_training(rest, engine_id, {"maxSteps": 40, "timeBudgetS": 600})
        )
        assert job_processes(build["id"])

        os.kill(api.process.pid, signal.SIGKILL)
        api.process.wait(10)
        wait_until(lambda: not job_processes(build["id"]), 15, "the job outlived its API service")

        api.restart()
        restarted = rest.get(f"/translation/engines/{engine_id}/builds/{build['id']}").json()
        assert restarted["state"] in ("Pending", "Active"), restarted
        assert restarted["revision"] > build["revision"]
        done = wait_for_build(rest, engine_id, restarted, 300)
        assert done["state"] == "Completed", done
        # The interrupted attempt's revision is burned: the restarted job publishes the next one.
        assert rest.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 2
        assert (tmp_path / "store" / "models" / engine_id / "2" / "manifest.json").is_file()
        assert not (tmp_path / "store" / "models" / engine_id / "1").exists()
