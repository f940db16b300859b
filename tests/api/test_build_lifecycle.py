"""A build is never born finished: whatever its engine type, a start answers Pending at revision 1
and every later state arrives as a new revision that a client long-polling
`GET …/builds/{id}?min-revision=<last + 1>` sees, as Serval's clients follow builds."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from serval.translation.v1 import platform_pb2 as translation_platform
from serval.translation.v1 import platform_pb2_grpc as translation_platform_grpc
from serval.word_alignment.v1 import platform_pb2 as alignment_platform
from serval.word_alignment.v1 import platform_pb2_grpc as alignment_platform_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.builds.echo import EchoLauncher
from serval_api.service.launcher import LaunchRefused
from serval_common.jobs import JobSpec
from tests.api.conftest import LONG_POLL_MAX_S, RunningApi, follow_build

TRANSLATION = "/translation/engines"
WORD_ALIGNMENT = "/word-alignment/engines"
ORDER = ["Pending", "Active", "Completed", "Faulted", "Canceled"]
JOB_TYPES = [(TRANSLATION, "nmt"), (TRANSLATION, "smt-transfer"), (WORD_ALIGNMENT, "statistical")]
ECHO_TYPES = [(TRANSLATION, "echo"), (WORD_ALIGNMENT, "echo-word-alignment")]


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def engine_of(client: httpx.Client, engines: str, engine_type: str) -> str:
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "type": engine_type}
    response = client.post(engines, json=body)
    assert response.status_code == 201, response.text
    engine_id: str = response.json()["id"]
    return engine_id


def start(client: httpx.Client, engines: str, engine_id: str) -> dict[str, Any]:
    response = client.post(f"{engines}/{engine_id}/builds", json={})
    assert response.status_code == 201, response.text
    build: dict[str, Any] = response.json()
    assert (build["state"], build["revision"]) == ("Pending", 1), build
    return build


def assert_lifecycle(seen: list[dict[str, Any]], final: str) -> None:
    """Pending first, `final` last, each revision greater than the one before and no state going back."""
    states = [b["state"] for b in seen]
    revisions = [b["revision"] for b in seen]
    assert states[0] == "Pending" and states[-1] == final, states
    assert all(a < b for a, b in itertools.pairwise(revisions)), revisions
    assert all(ORDER.index(a) < ORDER.index(b) for a, b in itertools.pairwise(states)), states


def report(api: RunningApi, engines: str, build_id: str, event: str) -> None:
    """What the build's job reports: BuildStarted or BuildCompleted, over the engine kind's platform API."""
    spec = api.launcher.specs[-1]
    assert spec.build_id == build_id
    auth = (("authorization", f"Bearer {spec.job_token}"),)
    platform: Any = translation_platform if engines == TRANSLATION else alignment_platform
    stub: Any = (
        translation_platform_grpc.TranslationPlatformApiStub(api.channel)
        if engines == TRANSLATION
        else alignment_platform_grpc.WordAlignmentPlatformApiStub(api.channel)
    )
    if event == "started":
        stub.BuildStarted(platform.BuildStartedRequest(build_id=build_id), metadata=auth)
    else:
        request = platform.BuildCompletedRequest(build_id=build_id, corpus_size=0, confidence=0.5)
        stub.BuildCompleted(request, metadata=auth)


@pytest.mark.parametrize(("engines", "engine_type"), ECHO_TYPES)
def test_an_echo_build_goes_pending_active_completed(
    owner: httpx.Client, engines: str, engine_type: str
) -> None:
    engine_id = engine_of(owner, engines, engine_type)
    build = start(owner, engines, engine_id)
    seen = follow_build(owner, f"{engines}/{engine_id}/builds/{build['id']}", build)
    assert_lifecycle(seen, "Completed")
    # Started and completed are revisions 2 and 3, whether or not the poller saw Active.
    assert seen[-1]["revision"] == 3
    assert owner.get(f"{engines}/{engine_id}").json()["modelRevision"] == 1
    again = owner.get(f"{engines}/{engine_id}/current-build", params={"min-revision": 3})
    assert (again.status_code, again.json()["state"]) == (200, "Completed")


@pytest.mark.parametrize(("engines", "engine_type"), JOB_TYPES)
def test_a_job_build_goes_pending_active_completed(
    api: RunningApi, owner: httpx.Client, engines: str, engine_type: str
) -> None:
    engine_id = engine_of(owner, engines, engine_type)
    build = start(owner, engines, engine_id)
    url = f"{engines}/{engine_id}/builds/{build['id']}"
    report(api, engines, build["id"], "started")
    active = owner.get(url, params={"min-revision": 2})
    assert (active.status_code, active.json()["state"]) == (200, "Active")
    with ThreadPoolExecutor(1) as pool:
        following = pool.submit(follow_build, owner, url, active.json())
        report(api, engines, build["id"], "completed")
        seen = [build, *following.result(timeout=LONG_POLL_MAX_S * 20)]
    assert_lifecycle(seen, "Completed")
    assert [b["state"] for b in seen] == ["Pending", "Active", "Completed"]


@pytest.mark.parametrize(("engines", "engine_type"), [JOB_TYPES[0], JOB_TYPES[2]])
@pytest.mark.parametrize(
    ("refusal", "shown"),
    [
        (LaunchRefused("ClearML queue 'gpu-x' does not exist"), "queue 'gpu-x' does not exist"),
        (RuntimeError("the launcher broke"), "error id"),
    ],
)
def test_a_failed_launch_goes_pending_then_faulted(
    api: RunningApi, owner: httpx.Client, engines: str, engine_type: str, refusal: Exception, shown: str
) -> None:
    engine_id = engine_of(owner, engines, engine_type)
    api.launcher.refusal = refusal
    build = start(owner, engines, engine_id)
    seen = follow_build(owner, f"{engines}/{engine_id}/builds/{build['id']}", build)
    assert_lifecycle(seen, "Faulted")
    assert [b["state"] for b in seen] == ["Pending", "Faulted"]
    assert "could not be launched" in seen[-1]["message"] and shown in seen[-1]["message"], seen[-1]
    assert "the launcher broke" not in seen[-1]["message"]
    current = owner.get(f"{engines}/{engine_id}/current-build", params={"min-revision": 2})
    assert (current.status_code, current.json()["state"]) == (200, "Faulted")
    assert owner.get(f"{engines}/{engine_id}").json()["isBuilding"] is False


@pytest.mark.parametrize(("engines", "engine_type"), JOB_TYPES)
def test_cancel_twice(api: RunningApi, owner: httpx.Client, engines: str, engine_type: str) -> None:
    """Serval's CancelBuild: 200 with the canceled build, then 204 once none is running."""
    engine_id = engine_of(owner, engines, engine_type)
    build = start(owner, engines, engine_id)
    canceled = owner.post(f"{engines}/{engine_id}/current-build/cancel")
    assert (canceled.status_code, canceled.json()["state"]) == (200, "Canceled")
    assert owner.post(f"{engines}/{engine_id}/current-build/cancel").status_code == 204
    seen = follow_build(owner, f"{engines}/{engine_id}/builds/{build['id']}", build)
    assert [b["state"] for b in seen] == ["Pending", "Canceled"]
    assert build["id"] in api.launcher.canceled


@pytest.mark.parametrize(("engines", "engine_type"), ECHO_TYPES)
def test_cancel_a_pending_echo_build(
    api: RunningApi, owner: httpx.Client, engines: str, engine_type: str
) -> None:
    """The echo build is held before its first step so the cancel lands while it is Pending; let
    go, it finds its build canceled and changes nothing."""
    assert api.service.services is not None
    launcher = api.service.services.launcher
    assert isinstance(launcher, EchoLauncher) and launcher.run_echo is not None
    run, gate = launcher.run_echo, api.run(_event())

    async def held(spec: JobSpec) -> None:
        await gate.wait()
        await run(spec)

    launcher.run_echo = held
    engine_id = engine_of(owner, engines, engine_type)
    build = start(owner, engines, engine_id)
    canceled = owner.post(f"{engines}/{engine_id}/current-build/cancel")
    assert (canceled.status_code, canceled.json()["state"]) == (200, "Canceled")
    assert owner.post(f"{engines}/{engine_id}/current-build/cancel").status_code == 204
    api.loop.call_soon_threadsafe(gate.set)
    assert api.run(launcher.wait_stopped(build["id"], 30))

    after = owner.get(f"{engines}/{engine_id}/builds/{build['id']}").json()
    assert (after["state"], after["revision"]) == ("Canceled", 2)
    assert owner.get(f"{engines}/{engine_id}").json()["modelRevision"] == 0


async def _event() -> asyncio.Event:
    return asyncio.Event()
