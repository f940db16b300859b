"""When the API service starts micro-builds (serval_api/service/micro_builds.py): after
`learning.micro_build_pairs` pairs confirmed on an nmt engine whose revision reads fuzzy matches,
or once the oldest of fewer is `learning.micro_build_after_s` old; never for a plain revision or an
engine whose build said `microBuilds: false`; an owner's own build cancels a running one; a
completed one keeps the engine's pretranslations. The jobs are played by the test through the
platform API (the real micro-build job runs in tests/e2e/test_training_build.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import ApiSettings, LearningSettings, Settings
from serval_common.store import open_store
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_pretranslations import pretranslations, start_build, text_engine, translated
from tests.helpers import wait_until


@pytest.fixture
def api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
        learning=LearningSettings(micro_build_pairs=3, micro_build_after_s=3600, micro_build_check_s=0.2),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def play_build(
    api: RunningApi,
    client: httpx.Client,
    engine_id: str,
    *,
    fuzzy: bool = True,
    options: dict[str, Any] | None = None,
) -> str:
    """Start a build and play its job: publish a revision manifest (reading fuzzy matches or plain),
    report it completed; its build id."""
    body: dict[str, Any] = {"options": options} if options else {}
    answer = client.post(f"/translation/engines/{engine_id}/builds", json=body)
    assert answer.status_code == 201, answer.text
    spec = api.launcher.specs[-1]
    complete(api, spec.build_id, engine_id, spec.revision, spec.job_token, fuzzy=fuzzy)
    return spec.build_id


def complete(
    api: RunningApi, build_id: str, engine_id: str, revision: int, token: str, *, fuzzy: bool
) -> None:
    manifest = Manifest(
        kind="model-revision",
        engine_id=engine_id,
        revision=revision,
        build_id=build_id,
        input_format="fuzzy-match" if fuzzy else "plain",
    )
    store = open_store((api.service.settings.home / "store").resolve().as_uri())
    publish_folder(store, f"models/{engine_id}/{revision}", None, manifest)
    job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    metadata = (("authorization", f"Bearer {token}"),)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build_id), metadata=metadata)
    job.BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=10, confidence=50.0),
        metadata=metadata,
    )


def confirm(client: httpx.Client, engine_id: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        answer = client.post(
            f"/translation/engines/{engine_id}/train-segment",
            json={
                "sourceSegment": f"verse {i} source",
                "targetSegment": f"mstari {i}",
                "sentenceStart": True,
            },
        )
        assert answer.status_code == 200, answer.text


def builds(client: httpx.Client, engine_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/translation/engines/{engine_id}/builds").json())


def test_a_micro_build_starts_after_the_set_number_of_confirmed_pairs_and_continues_the_revision(
    api: RunningApi,
) -> None:
    with api.client() as client:
        engine = create_engine(client)
        play_build(api, client, engine["id"])
        confirm(client, engine["id"], 2)
        confirm(client, engine["id"], 1, start=2)
        wait_until(lambda: len(api.launcher.specs) == 2, 30, "the micro-build launched")
        micro = api.launcher.specs[-1]
        options = json.loads(micro.options_json)
        assert options["microBuild"] == {"parentRevision": 1, "newPairs": 3, "replay": 4}
        assert options["maxSteps"] == api.service.settings.learning.micro_build_steps
        [_, listed] = builds(client, engine["id"])
        assert (listed["name"], listed["state"], listed["pretranslate"]) == ("micro-build", "Pending", [])
        assert client.get(f"/translation/engines/{engine['id']}").json()["isBuilding"] is True

        # Pairs confirmed while it runs start nothing more; once it has completed, the count
        # starts again from what it trained on.
        confirm(client, engine["id"], 2, start=3)
        complete(api, micro.build_id, engine["id"], micro.revision, micro.job_token, fuzzy=True)
        assert client.get(f"/translation/engines/{engine['id']}").json()["modelRevision"] == 2
        assert len(api.launcher.specs) == 2
        confirm(client, engine["id"], 1, start=5)
        wait_until(lambda: len(api.launcher.specs) == 3, 30, "the next micro-build launched")


def test_an_owners_build_cancels_a_running_micro_build(api: RunningApi) -> None:
    with api.client() as client:
        engine = create_engine(client)
        play_build(api, client, engine["id"])
        confirm(client, engine["id"], 3)
        wait_until(lambda: len(api.launcher.specs) == 2, 30, "the micro-build launched")
        micro = api.launcher.specs[-1]
        answer = client.post(f"/translation/engines/{engine['id']}/builds", json={})
        assert answer.status_code == 201, answer.text
        assert api.launcher.canceled == [micro.build_id]
        states = {b["id"]: b["state"] for b in builds(client, engine["id"])}
        assert states[micro.build_id] == "Canceled" and states[answer.json()["id"]] == "Pending"


def test_no_micro_build_for_a_plain_revision_or_an_engine_that_opted_out(api: RunningApi) -> None:
    with api.client() as client:
        plain = create_engine(client)
        play_build(api, client, plain["id"], fuzzy=False)
        opted_out = create_engine(client)
        play_build(api, client, opted_out["id"], options={"microBuilds": False})
        for engine in (plain, opted_out):
            confirm(client, engine["id"], 4)
        # The sweep runs every 0.2 s here: give it several turns.
        time.sleep(1.5)
        assert len(api.launcher.specs) == 2


def test_fewer_pairs_start_a_micro_build_once_the_oldest_is_old_enough(api: RunningApi) -> None:
    api.service.settings.learning.micro_build_after_s = 1.0
    with api.client() as client:
        engine = create_engine(client)
        play_build(api, client, engine["id"])
        confirm(client, engine["id"], 1)
        assert len(api.launcher.specs) == 1
        wait_until(lambda: len(api.launcher.specs) == 2, 30, "the sweep started the micro-build")
        options = json.loads(api.launcher.specs[-1].options_json)
        assert options["microBuild"]["newPairs"] == 1


def test_a_completed_micro_build_keeps_the_engines_pretranslations(api: RunningApi) -> None:
    with api.client(scopes=ALL_SCOPES) as client:
        engine_id, pc_id = text_engine(client)
        job = start_build(api, client, engine_id, pc_id)
        rows = translated(job.source_rows(), "draft")
        assert job.insert(rows) == 2
        spec = api.launcher.specs[-1]
        complete(api, spec.build_id, engine_id, spec.revision, spec.job_token, fuzzy=True)
        drafts = pretranslations(client, engine_id, pc_id).json()
        assert [d["translation"] for d in drafts] == [r["translation"] for r in rows]

        confirm(client, engine_id, 3)
        wait_until(lambda: len(api.launcher.specs) == 2, 30, "the micro-build launched")
        micro = api.launcher.specs[-1]
        complete(api, micro.build_id, engine_id, micro.revision, micro.job_token, fuzzy=True)
        assert client.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 2
        assert pretranslations(client, engine_id, pc_id).json() == drafts


def test_a_client_cannot_start_a_micro_build_itself(api: RunningApi) -> None:
    with api.client() as client:
        engine = create_engine(client)
        answer = client.post(
            f"/translation/engines/{engine['id']}/builds",
            json={"options": {"microBuild": {"parentRevision": 1, "newPairs": 1}}},
        )
        assert answer.status_code == 400 and "microBuild" in answer.text, answer.text
