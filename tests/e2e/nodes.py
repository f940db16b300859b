"""Real node processes for end-to-end tests against an in-process API service: starting one with
its metrics, building inference-only engines of the tiny base model through the platform API (as
an inference-only build job does) and `smt-transfer` engines serving a given Thot model folder,
and reading what the node and the admin API report."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import httpx

from build_jobs.publish import publish_inference_only, publish_revision
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.auth import ADMIN
from serval_cli import processes
from serval_common.manifest import Manifest
from serval_common.store import ModelStore, open_store
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.conftest import BASE_MODEL
from tests.helpers import free_port, wait_until

BASE = BASE_MODEL
"""The base model the `store` fixture (tests/e2e/conftest.py) publishes."""
TARGETS = (("sw", "swh_Latn"), ("fr", "fra_Latn"), ("de", "deu_Latn"))


class Node:
    """A node process with its metrics endpoint."""

    def __init__(self, api: RunningApi, home: Path, token: str, name: str) -> None:
        self.name = name
        self.metrics_port = free_port()
        self.process = processes.start(
            ["node", "--home", str(home / name), "--api-address", api.grpc_target, "--node-id", name],
            home / f"{name}.log",
            {
                "SERVAL_NODE__TOKEN": token,
                "SERVAL_NODE__METRICS_PORT": str(self.metrics_port),
                "SERVAL_STORE__URL": (api.service.settings.home / "store").resolve().as_uri(),
            },
        )
        wait_until(
            lambda: self.process.poll() is None and admin_nodes(api).get(name, {}).get("status") == "serving",
            60,
            f"node {name} connected",
            interval_s=0.2,
        )

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    def metric(self, name: str, labels: str = "") -> float:
        pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
        match = re.search(pattern, self.metrics(), re.MULTILINE)
        assert match, f"{name}{{{labels}}} missing from the node's metrics"
        return float(match.group(1))

    def loads(self) -> float:
        """Sets of weights fetched and loaded so far."""
        return self.metric("serval_node_model_load_seconds_count")

    def stop(self) -> None:
        processes.stop(self.process)


def inference_only_build(
    api: RunningApi, client: httpx.Client, store: ModelStore, engine: dict[str, Any]
) -> int:
    """Start a build and play its job: publish the base model as the engine's revision (no weights
    copied), then report it completed, as an inference-only build job does."""
    response = client.post(f"/translation/engines/{engine['id']}/builds", json={})
    assert response.status_code == 201, response.text
    spec = api.launcher.specs[-1]
    publish_inference_only(
        store,
        engine_id=engine["id"],
        revision=spec.revision,
        build_id=spec.build_id,
        base_model=BASE,
        source_language=spec.source_language,
        target_language=spec.target_language,
    )
    job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    metadata = (("authorization", f"Bearer {spec.job_token}"),)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=metadata)
    job.BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=spec.build_id, corpus_size=0, confidence=0.0),
        metadata=metadata,
    )
    return spec.revision


def built_engines(
    api: RunningApi, store: ModelStore, count: int, owners: tuple[str, ...] = ("owner-a", "owner-b")
) -> list[tuple[httpx.Client, dict[str, Any]]]:
    """`count` inference-only engines of the base model, owners and target languages taken in turn."""
    clients = {owner: api.client(owner) for owner in owners}
    engines = []
    for i in range(count):
        client = clients[owners[i % len(owners)]]
        target, _ = TARGETS[i % len(TARGETS)]
        engine = create_engine(client, targetLanguage=target)
        inference_only_build(api, client, store, engine)
        engines.append((client, engine))
    return engines


def translate(client: httpx.Client, engine_id: str, segment: str) -> httpx.Response:
    response = client.post(f"/translation/engines/{engine_id}/translate", json=segment, timeout=60)
    assert response.status_code == 200, response.text
    return response


def admin_nodes(api: RunningApi) -> dict[str, dict[str, Any]]:
    with api.client("ops", (ADMIN,)) as admin:
        nodes = admin.get("/admin/nodes").json()
    return {n["id"]: n for n in nodes}


def smt_engine(api: RunningApi, client: httpx.Client, folder: Path) -> str:
    """An smt-transfer engine whose build published `folder` as revision 1 (the test plays the job)."""
    engine_id: str = create_engine(client, engine_type="smt-transfer")["id"]
    started = client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []})
    assert started.status_code == 201, started.text
    spec = api.launcher.specs[-1]
    manifest = Manifest(
        kind="model-revision",
        backend="thot-smt",
        engine_id=engine_id,
        revision=spec.revision,
        build_id=spec.build_id,
        source_language="en",
        target_language="sw",
    )
    publish_revision(open_store((api.service.settings.home / "store").resolve().as_uri()), manifest, folder)
    job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    auth = (("authorization", f"Bearer {spec.job_token}"),)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=auth)
    job.BuildCompleted(platform_pb2.BuildCompletedRequest(build_id=spec.build_id), metadata=auth)
    return engine_id
