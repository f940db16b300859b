"""`serval build …` against a real in-process API service. The test plays the build job through the
platform gRPC API (with the build's job token) while `serval build watch` follows the build in a
separate process, reading its output line by line as a log or CI would."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
from typer.testing import CliRunner

from serval.translation.v1 import platform_pb2
from serval_cli.build_watch import BuildWatchError, watch_build
from serval_cli.main import app
from serval_cli.processes import RestClient, free_port
from tests.api.conftest import LONG_POLL_MAX_S, RunningApi, create_engine
from tests.api.test_platform_api import as_job, job_stub

runner = CliRunner()


def cli(api: RunningApi, key: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["build", *args, "--url", api.rest_url, "--api-key", key])
    return result.exit_code, result.output


class Watcher:
    """`serval build watch` as a child process, its stdout collected line by line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout_s: float = 10) -> str:
        """The first line from now on that contains `text`."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"the watcher ended before printing {text!r}: {self.lines}")
            self.lines.append(line)
            if text in line:
                return line

    def finish(self, timeout_s: float = 15) -> int:
        code = self.process.wait(timeout_s)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return code


@contextmanager
def watching(api: RunningApi, key: str, *args: str) -> Iterator[Watcher]:
    env = {**os.environ, "SERVAL_URL": api.rest_url, "SERVAL_API_KEY": key, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "serval_cli", "build", "watch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        yield Watcher(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_build_commands_have_help() -> None:
    for command in ("start", "watch", "list", "cancel"):
        result = runner.invoke(app, ["build", command, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.output


def test_start_list_and_cancel(api: RunningApi, client: httpx.Client) -> None:
    key = api.api_key()
    engine = create_engine(client)
    code, output = cli(api, key, "start", engine["id"], "--options", '{"maxSteps": 5}', "--name", "first")
    assert code == 0, output
    spec = api.launcher.specs[-1]
    assert f"started build {spec.build_id} (Pending)" in output
    assert json.loads(spec.options_json) == {"maxSteps": 5}

    code, output = cli(api, key, "list", engine["id"])
    assert code == 0, output
    assert spec.build_id in output and "first" in output and "Pending" in output

    code, output = cli(api, key, "start", engine["id"])
    assert code == 3 and "409" in output, "a second build while one is pending is refused"

    code, output = cli(api, key, "cancel", engine["id"])
    assert code == 0, output
    assert f"canceled build {spec.build_id} (Canceled)" in output
    assert api.launcher.canceled == [spec.build_id]
    build = client.get(f"/translation/engines/{engine['id']}/builds/{spec.build_id}").json()
    assert build["state"] == "Canceled"
    assert "Canceled" in cli(api, key, "list", engine["id"])[1]

    code, output = cli(api, key, "cancel", engine["id"])
    assert code == 0 and "no build pending or running" in output


def test_start_sends_the_build_config(api: RunningApi, client: httpx.Client) -> None:
    key = api.api_key()
    engine = create_engine(client)
    code, output = cli(api, key, "start", engine["id"], "--train-on", "no-such-corpus")
    assert code == 3 and "no-such-corpus" in output
    code, output = cli(api, key, "start", engine["id"], "--options", '{"maxSteps": 0}')
    assert code == 3 and "maxSteps" in output, "the service refuses bad options (400)"
    code, output = cli(api, key, "start", engine["id"], "--options", "[1]")
    assert code == 2 and "JSON object" in output
    code, output = cli(api, key, "start", engine["id"], "--no-train", "--train-on", "x")
    assert code == 2 and "not both" in output
    assert api.launcher.specs == []

    code, output = cli(api, key, "start", engine["id"], "--no-train")
    assert code == 0, output
    assert api.launcher.specs[-1].train is False
    build = client.get(f"/translation/engines/{engine['id']}/current-build").json()
    assert build["trainOn"] == []


def test_start_and_watch_an_echo_build(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client, "echo")
    code, output = cli(api, api.api_key(), "start", engine["id"], "--no-train", "--watch")
    assert code == 0, output
    assert "Completed" in output.splitlines()[-1]


def _complete(api: RunningApi, build_id: str, client: httpx.Client, engine_id: str) -> None:
    job_stub(api).BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=3, confidence=40.0),
        metadata=as_job(api),
    )


def _fault(api: RunningApi, build_id: str, client: httpx.Client, engine_id: str) -> None:
    job_stub(api).BuildFaulted(
        platform_pb2.BuildFaultedRequest(build_id=build_id, message="out of memory\n  at step 12"),
        metadata=as_job(api),
    )


def _cancel(api: RunningApi, build_id: str, client: httpx.Client, engine_id: str) -> None:
    assert client.post(f"/translation/engines/{engine_id}/current-build/cancel").status_code == 200


Finish = Callable[[RunningApi, str, httpx.Client, str], None]


@pytest.mark.parametrize(
    ("finish", "state", "exit_code"),
    [(_complete, "Completed", 0), (_fault, "Faulted", 1), (_cancel, "Canceled", 2)],
    ids=["completed", "faulted", "canceled"],
)
def test_watch_follows_the_build_to_its_end(
    api: RunningApi, client: httpx.Client, finish: Finish, state: str, exit_code: int
) -> None:
    engine = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    job, auth = job_stub(api), as_job(api)
    with watching(api, api.api_key(), engine["id"]) as watcher:
        watcher.wait_for("Pending")
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=auth)
        watcher.wait_for("Active")
        for step, message in ((1, "scoring the base model"), (2, "training step 10/40, loss 3.210")):
            job.UpdateBuildStatus(
                platform_pb2.UpdateBuildStatusRequest(
                    build_id=build["id"], step=step, progress=0.25 * step, message=message
                ),
                metadata=auth,
            )
            line = watcher.wait_for(message)
            assert f"{0.25 * step:.0%}" in line
        time.sleep(LONG_POLL_MAX_S * 1.5)  # the long poll times out (408) and the watcher polls again
        finish(api, build["id"], client, engine["id"])
        code = watcher.finish()
    assert code == exit_code, watcher.lines
    if state == "Faulted":
        summary, detail = watcher.lines[-2:]
        assert "out of memory" in summary and detail == "  at step 12", "the summary is one line"
    else:
        summary = watcher.lines[-1]
    assert summary.startswith(f"build {build['id']} {state}"), watcher.lines

    code, output = cli(api, api.api_key(), "watch", engine["id"])
    assert code == exit_code, "with no build running, `watch` reports the latest build"
    assert f"build {build['id']} {state}" in output


def test_watch_a_build_queued_behind_others(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    job, auth = job_stub(api), as_job(api)
    with watching(api, api.api_key(), engine["id"], build["id"]) as watcher:
        watcher.wait_for("Pending")
        job.UpdateBuildStatus(
            platform_pb2.UpdateBuildStatusRequest(build_id=build["id"], step=0, queue_depth=2), metadata=auth
        )
        watcher.wait_for("2 ahead in the job queue")
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=auth)
        watcher.wait_for("Active")
        _complete(api, build["id"], client, engine["id"])
        assert watcher.finish() == 0


def test_watch_gives_up_on_an_unreachable_service(api: RunningApi) -> None:
    from rich.console import Console

    dead = RestClient(f"http://127.0.0.1:{free_port()}", "key")
    with pytest.raises(BuildWatchError, match="unreachable after 3 attempts"):
        watch_build(dead, "engine", "build", Console(), retries=2, backoff_s=0.05)

    result = runner.invoke(
        app, ["build", "watch", "engine", "build", "--url", dead.base_url, "--retries", "1"]
    )
    assert result.exit_code == 3 and "unreachable" in result.output


def test_watch_unknown_engine_or_build(api: RunningApi, client: httpx.Client) -> None:
    key = api.api_key()
    code, output = cli(api, key, "watch", "no-such-engine")
    assert code == 3 and "404" in output
    engine = create_engine(client)
    code, output = cli(api, key, "watch", engine["id"])
    assert code == 3 and "has no builds" in output
    code, output = cli(api, key, "watch", engine["id"], "no-such-build")
    assert code == 3 and "404" in output
