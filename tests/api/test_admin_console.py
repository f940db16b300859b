"""What the web console reads (`/api/v1/admin/builds`, `/summary`, `/engines`, `/base-models`,
`/overview`): builds of every owner with their progress and phase, recent failures with their
message and the build history, counts per family and owner, the webhook backlog, every engine with
its last build and bound keys, the base models with the languages each knows, and the overview's
bounded long poll; all of it for admins only, and a 403 that says which scope is missing and how to
get a key with it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, CREATE_HOOKS, READ_ENGINES, READ_FILES
from serval_common.languages import NLLB_LANGUAGE_CODES
from serval_common.manifest import Manifest, publish_folder
from tests.api.conftest import (
    LONG_POLL_MAX_S,
    RunningApi,
    create_engine,
    report_fault,
    report_training,
    start_build,
)

ROUTES = ("/admin/builds", "/admin/summary", "/admin/overview", "/admin/engines", "/admin/base-models")


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


def test_the_missing_scope_is_named_with_the_command_that_makes_a_key_with_it(api: RunningApi) -> None:
    with (
        api.client(owner="team", scopes=(READ_ENGINES,)) as team,
        api.client("files", (READ_FILES,)) as files,
    ):
        refused = team.get("/admin/overview")
        assert refused.status_code == 403
        assert "needs the scope 'admin'" in refused.json()["message"]
        assert "serval admin api-key create --owner <owner> --scope admin" in refused.json()["message"]
        engines = files.get("/translation/engines")  # a Serval route: the same 403, the same shape
        assert engines.status_code == 403
        assert "'read:translation_engines'" in engines.json()["message"]
        assert "--scope read:translation_engines" in engines.json()["message"]


def test_engines_with_their_last_build_and_bound_keys_and_the_build_history(
    api: RunningApi, admin: httpx.Client
) -> None:
    with api.client("owner-a") as a, api.client("owner-b") as b:
        named, faulted, token = start_build(api, a, targetLanguage="fr", name="Psalms draft")
        report_fault(api, faulted, token, "out of memory at step 12")
        unbuilt = create_engine(b, targetLanguage="de")["id"]
        _, running, _ = start_build(api, b, targetLanguage="sw")
    bound = admin.post(
        "/admin/api-keys", json={"owner": "owner-a", "scopes": [READ_ENGINES], "engineId": named}
    ).json()
    gone = admin.post(
        "/admin/api-keys", json={"owner": "owner-a", "scopes": [READ_ENGINES], "engineId": named}
    )
    assert admin.delete(f"/admin/api-keys/{gone.json()['id']}").status_code == 200

    listed = admin.get("/admin/engines")
    assert listed.status_code == 200, listed.text
    engines = {e["id"]: e for e in listed.json()}
    psalms = engines[named]
    assert (psalms["name"], psalms["owner"], psalms["engineType"]) == ("Psalms draft", "owner-a", "nmt")
    assert (psalms["sourceLanguage"], psalms["targetLanguage"], psalms["modelRevision"]) == ("en", "fr", 0)
    assert psalms["lastBuild"]["id"] == faulted and psalms["lastBuild"]["state"] == "Faulted"
    assert psalms["lastBuild"]["message"] == "out of memory at step 12"
    assert [(k["id"], k["owner"]) for k in psalms["boundKeys"]] == [(bound["id"], "owner-a")], "active ones"
    assert psalms["boundKeys"][0]["prefix"] == bound["prefix"], "the key's start, never its secret"
    assert engines[unbuilt]["owner"] == "owner-b" and "lastBuild" not in engines[unbuilt]
    assert engines[unbuilt]["boundKeys"] == []

    history = admin.get("/admin/builds").json()["recent"]
    assert [b["id"] for b in history] == [running, faulted], "newest first, every owner and state"
    assert history[1]["message"] == "out of memory at step 12" and history[1]["dateFinished"]
    assert history[0]["state"] == "Active" and history[0]["dateStarted"]


def test_base_models_with_the_languages_each_knows(
    api: RunningApi, admin: httpx.Client, tmp_path: Path
) -> None:
    store = api.service.services.store if api.service.services else None
    assert store is not None
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.bin").write_bytes(b"\0" * 2048)
    default = api.service.settings.jobs.default_base_model
    publish_folder(
        store,
        f"base-models/{default}",
        weights,
        Manifest(kind="base-model", name=default, languages=["eng_Latn", "swh_Latn"], quantization="int8"),
    )
    # A manifest written before base models listed their languages: a full NLLB-200 checkpoint.
    old = Manifest(kind="base-model", name="nllb-200-600m").model_dump(mode="json", exclude={"languages"})
    store.write_bytes("base-models/nllb-200-600m/manifest.json", json.dumps(old).encode())
    store.write_bytes("base-models/broken/manifest.json", b"{not json")

    answer = admin.get("/admin/base-models")
    assert answer.status_code == 200, answer.text
    models = {m["name"]: m for m in answer.json()["baseModels"]}
    assert set(models) == {default, "nllb-200-600m"}
    tiny = models[default]
    assert tiny["languages"] == ["eng_Latn", "swh_Latn"] and not tiny["allNllbLanguages"]
    assert tiny["languagesText"] == "eng_Latn and swh_Latn"
    assert tiny["isDefault"] and tiny["isPublic"] and tiny["sizeBytes"] == 2048
    full = models["nllb-200-600m"]
    assert full["allNllbLanguages"] and len(full["languages"]) == len(NLLB_LANGUAGE_CODES)
    assert not full["isDefault"]
    [problem] = answer.json()["problems"]
    assert problem["name"] == "broken"
