"""Bounded storage: the store sweep keeps each engine's current revision, the
`api.keep_previous_revisions` before it and any a node holds, removes the other superseded
revisions once `api.revision_grace_s` has passed since a build superseded them, and the `hf/`
checkpoints of all but the current revision after the same grace; on a real local store and a
real S3-protocol server (moto), through a real API service whose builds the test plays as their
jobs would (publishing each revision with its weights and checkpoint, then reporting completion).

No build reads a revision: a build starts from a base model's checkpoint (`baseModel` names a base
model, `base-models/{name}/hf/`), so no revision is kept for a build to start from; a running
build's own revision folder is the build's, kept while it runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from build_jobs.publish import publish_revision
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.db.models import BuildRow
from serval_api.service.store_sweep import sweep_store
from serval_common.manifest import Manifest
from serval_common.settings import ApiSettings, Settings, StoreSettings
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_family_routing import NMT, FamilyNode
from tests.api.test_node_protocol import new_node_token
from tests.helpers import wait_until

pytestmark = pytest.mark.database


@pytest.fixture(params=["local", "s3"])
def api(request: pytest.FixtureRequest, tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    store = StoreSettings()
    if request.param == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        store = StoreSettings(
            url=f"s3://{bucket}/serval", s3_endpoint_url=request.getfixturevalue("moto_endpoint")
        )
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        store=store,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, heartbeat_interval_s=0.2),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def store_of(api: RunningApi) -> ModelStore:
    assert api.service.services is not None
    return api.service.services.store


def completed_build(api: RunningApi, client: httpx.Client, engine_id: str, work: Path) -> str:
    """A fine-tune's build: its revision's weights and `hf/` checkpoint published, then completed."""
    started = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert started.status_code == 201, started.text
    spec = api.launcher.specs[-1]
    weights, checkpoint = work / f"{spec.revision}/ct2", work / f"{spec.revision}/hf"
    for folder in (weights, checkpoint):
        folder.mkdir(parents=True)
    (weights / "model.bin").write_bytes(f"weights of revision {spec.revision}".encode())
    (checkpoint / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    (checkpoint / "model.safetensors").write_bytes(f"checkpoint of revision {spec.revision}".encode())
    manifest = Manifest(
        kind="model-revision",
        engine_id=engine_id,
        revision=spec.revision,
        build_id=spec.build_id,
        source_language="eng_Latn",
        target_language="swh_Latn",
    )
    publish_revision(store_of(api), manifest, weights, checkpoint)
    job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    auth = (("authorization", f"Bearer {spec.job_token}"),)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=auth)
    job.BuildCompleted(platform_pb2.BuildCompletedRequest(build_id=spec.build_id), metadata=auth)
    return spec.build_id


def finished_ago(api: RunningApi, build_id: str, ago: timedelta) -> None:
    """As if the build had completed `ago` (the grace is measured from it; the test waits for nothing)."""
    assert api.service.services is not None
    db = api.service.services.db

    async def write() -> None:
        async with db.session() as s:
            await s.execute(
                update(BuildRow).where(BuildRow.id == build_id).values(date_finished=datetime.now(UTC) - ago)
            )

    api.run(write())


def revisions_in_store(api: RunningApi, engine_id: str) -> dict[int, set[str]]:
    """Revision → what it holds: `weights` (its manifest and model files) and/or `hf`."""
    held: dict[int, set[str]] = {}
    for key in store_of(api).list_keys(f"models/{engine_id}"):
        revision, rest = key.split("/")[2], key.split("/")[3]
        held.setdefault(int(revision), set()).add("hf" if rest == "hf" else "weights")
    return held


def sweep(api: RunningApi) -> int:
    assert api.service.services is not None
    return api.run(sweep_store(api.service.services))


def test_superseded_revisions_go_after_their_grace_and_checkpoints_with_them(
    api: RunningApi, tmp_path: Path
) -> None:
    with api.client() as client:
        engine_id = create_engine(client)["id"]
        builds = [completed_build(api, client, engine_id, tmp_path / "work") for _ in range(4)]
        other = create_engine(client)["id"]
        other_builds = [completed_build(api, client, other, tmp_path / "other") for _ in range(2)]
        assert client.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 4
        everything = {revision: {"weights", "hf"} for revision in (1, 2, 3, 4)}
        assert revisions_in_store(api, engine_id) == everything

        assert sweep(api) == 0, "every revision was superseded moments ago: within the grace"
        for build, days in zip(builds, (10, 9, 8), strict=False):
            finished_ago(api, build, timedelta(days=days))
        finished_ago(api, builds[3], timedelta(minutes=10))
        finished_ago(api, other_builds[0], timedelta(days=4))
        finished_ago(api, other_builds[1], timedelta(days=3))  # superseded revision 1 three days ago

        holder = FamilyNode(api, new_node_token(api), "holder", [NMT])
        try:
            holder.ready(engine_id, 1)
            assert api.service.services is not None and api.service.services.fleet is not None
            registry = api.service.services.fleet.registry
            wait_until(lambda: any(s.held() for s in registry.sessions()), 10, "the node's model known")
            running = client.post(f"/translation/engines/{engine_id}/builds", json={})
            assert running.status_code == 201
            given = api.launcher.specs[-1].revision
            store_of(api).write_bytes(f"models/{engine_id}/{given}/model.bin", b"being written")

            assert sweep(api) == 3, "revision 2 whole, revision 1's checkpoint, the other engine's one"
            assert revisions_in_store(api, engine_id) == {
                1: {"weights"},  # superseded long ago, but a node holds it: its weights stay
                3: {"weights", "hf"},  # the previous revision, superseded 10 minutes ago
                4: {"weights", "hf"},  # current
                given: {"weights"},  # a running build's
            }
            assert revisions_in_store(api, other) == {1: {"weights"}, 2: {"weights", "hf"}}, (
                "the other engine keeps its previous revision, less its checkpoint"
            )
        finally:
            holder.close()
        wait_until(lambda: not registry.sessions(), 10, "the node gone")
        finished_ago(api, builds[3], timedelta(days=2))
        assert sweep(api) == 2, "revision 1 now nobody holds it, and revision 3's checkpoint"
        assert revisions_in_store(api, engine_id) == {
            3: {"weights"},
            4: {"weights", "hf"},
            given: {"weights"},
        }
        assert sweep(api) == 0

        download = client.get(f"/translation/engines/{engine_id}/model-download-url")
        assert download.status_code == 200, download.text
        archive = httpx.get(download.json()["url"], timeout=30)
        assert archive.status_code == 200 and archive.content, "the current revision downloads whole"


def test_more_previous_revisions_are_kept_when_asked(api: RunningApi, tmp_path: Path) -> None:
    assert api.service.services is not None
    settings: Any = api.service.services.settings
    api.service.services.settings = settings.model_copy(
        update={"api": settings.api.model_copy(update={"keep_previous_revisions": 2, "revision_grace_s": 0})}
    )
    try:
        with api.client() as client:
            engine_id = create_engine(client)["id"]
            for _ in range(4):
                completed_build(api, client, engine_id, tmp_path)
            assert sweep(api) == 3, "revision 1, and the checkpoints of 2 and 3"
            assert revisions_in_store(api, engine_id) == {
                2: {"weights"},
                3: {"weights"},
                4: {"weights", "hf"},
            }
    finally:
        api.service.services.settings = settings
