"""What the web console reads (`/api/v1/admin/builds`, `/summary`, `/overview`): builds of every
owner with their progress and phase, recent failures with their message, counts per family and
owner, the webhook backlog, and the overview's bounded long poll; all of it for admins only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, CREATE_HOOKS, READ_ENGINES
from tests.api.conftest import (
    LONG_POLL_MAX_S,
    RunningApi,
    create_engine,
    report_fault,
    report_training,
    start_build,
)

ROUTES = ("/admin/builds", "/admin/summary", "/admin/overview")


@pytest.fixture
def admin(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(owner="ops", scopes=(ADMIN,)) as client:
        yield client


def test_only_admins_read_the_console(api: RunningApi) -> None:
    with (
        api.client(owner="team", scopes=(READ_ENGINES,)) as team,
        httpx.Client(base_url=f"{api.rest_url}/api/v1") as nobody,
    ):
        for route in ROUTES:
            assert team.get(route).status_code == 403, route
            assert nobody.get(route).status_code == 401, route


def test_builds_of_every_owner_with_progress_phase_and_failures(api: RunningApi, admin: httpx.Client) -> None:
    with api.client("owner-a") as a, api.client("owner-b") as b:
        engine_a, running, token = start_build(api, a, targetLanguage="fr")
        report_training(api, running, token, 0.4, 40)
        engine_b = create_engine(b, targetLanguage="de")
        assert b.post(f"/translation/engines/{engine_b['id']}/builds", json={}).status_code == 201
        queued = api.launcher.specs[-1].build_id
        _, faulted, fault_token = start_build(api, b, targetLanguage="sw")
        report_fault(api, faulted, fault_token, "out of memory at step 12")

    builds = admin.get("/admin/builds")
    assert builds.status_code == 200, builds.text
    body = builds.json()
    [active] = body["running"]
    assert (active["id"], active["engineId"], active["owner"]) == (running, engine_a, "owner-a")
    assert active["engineType"] == "nmt" and active["state"] == "Active"
    assert active["progress"] == pytest.approx(0.4)
    assert (active["phase"], active["step"], active["stepCount"]) == ("Train", 40, 100)
    assert active["message"] == "training step 40"
    assert [q["id"] for q in body["queued"]] == [queued]
    assert body["queued"][0]["owner"] == "owner-b"
    assert body["queueDepth"] == api.launcher.queue_depth()
    [failure] = body["recentFailures"]
    assert failure["id"] == faulted and "out of memory" in failure["message"]


def test_summary_counts_engines_keys_and_webhooks(api: RunningApi, admin: httpx.Client) -> None:
    with api.client("owner-a", (*ALL_ENGINE_SCOPES, CREATE_HOOKS)) as a:
        engine = create_engine(a, targetLanguage="fr")
        create_engine(a, targetLanguage="de")
        hook = a.post(
            "/hooks",
            json={
                "payloadUrl": "https://example.com/hook",
                "secret": "s" * 16,
                "events": ["TranslationBuildStarted"],
            },
        )
        assert hook.status_code == 201, hook.text
    bound = admin.post(
        "/admin/api-keys", json={"owner": "owner-a", "scopes": [READ_ENGINES], "engineId": engine["id"]}
    )
    assert bound.status_code == 201, bound.text
    revoked = admin.post("/admin/api-keys", json={"owner": "owner-c", "scopes": [READ_ENGINES]}).json()
    assert admin.delete(f"/admin/api-keys/{revoked['id']}").status_code == 200

    summary = admin.get("/admin/summary").json()
    assert {"owner": "owner-a", "engineType": "nmt", "count": 2} in summary["engines"]
    keys = {k["owner"]: k for k in summary["apiKeys"]}
    assert keys["owner-a"]["active"] >= 2 and keys["owner-a"]["bound"] == 1
    assert (keys["owner-c"]["active"], keys["owner-c"]["revoked"]) == (0, 1)
    assert summary["webhooks"]["hooks"] == 1
    assert summary["webhooks"]["pending"] >= 0


def test_overview_long_poll_answers_a_change_or_when_the_wait_is_over(
    api: RunningApi, admin: httpx.Client
) -> None:
    first = admin.get("/admin/overview")
    assert first.status_code == 200, first.text
    version = first.json()["version"]
    assert first.json()["grpcPort"] == api.service.grpc_port

    started = time.monotonic()
    quiet = admin.get("/admin/overview", params={"since": version, "wait": 30})
    assert quiet.json()["version"] == version, "nothing changed: the same overview, never 408"
    assert 0.9 * LONG_POLL_MAX_S <= time.monotonic() - started < 10, "waited, within the service's bound"

    with api.client("owner-a") as a:
        _, build, token = start_build(api, a, targetLanguage="fr")
        moved = admin.get("/admin/overview").json()
        assert moved["version"] != version
        assert [b["id"] for b in moved["builds"]["running"]] == [build]
        later = threading.Timer(0.3, report_training, (api, build, token, 0.5, 50))
        later.start()
        try:
            changed = admin.get("/admin/overview", params={"since": moved["version"], "wait": 30}).json()
        finally:
            later.join()
    if changed["version"] == moved["version"]:  # the report came after the (short) wait was over
        changed = admin.get("/admin/overview").json()
    assert changed["version"] != moved["version"]
    assert changed["builds"]["running"][0]["progress"] == pytest.approx(0.5)
    assert admin.get("/admin/overview", params={"wait": -1}).status_code == 400
