"""Scenarios about models rather than requests: the hot swap to a new revision under load, the node's
memory against the models it holds, a cold load from an S3-protocol server (moto), and what the
processes spend while no request comes."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

from bench.clients import RestClient
from bench.system import System
from bench.workload import Workload
from inference_gpu.families.nmt.model import NmtModel
from serval_cli.processes import free_port
from serval_common.manifest import MANIFEST, TRAINING_CHECKPOINT, fetch_folder, publish_folder, read_manifest
from serval_common.settings import Settings, StoreSettings
from serval_common.store import ModelStore, store_from_settings

MB = 1024 * 1024


def distinct_base_model(store: ModelStore, folder: Path, base_model: str, tag: str) -> str:
    """Publish a copy of the base model in `folder` (its CTranslate2 files, one file more) as
    `base-models/{base_model}-{tag}`: the same model with a weights identity of its own, as a
    fine-tune's would be, so a node loads it beside the original instead of sharing it."""
    name = f"{base_model}-{tag}"
    if store.exists(f"base-models/{name}/{MANIFEST}"):
        return name
    with tempfile.TemporaryDirectory(prefix="serval-bench-copy-") as tmp:
        copy = Path(tmp) / name
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(TRAINING_CHECKPOINT))
        (copy / "weights-copy.txt").write_text(f"{name}\n", encoding="utf-8")
        manifest = read_manifest(store, f"base-models/{base_model}")
        publish_folder(store, f"base-models/{name}", copy, manifest.model_copy(update={"name": name}))
    return name


def hot_swap(
    system: System, engine_id: str, base_model: str, workload: Workload, clients: int
) -> dict[str, Any]:
    """Keep `clients` REST callers busy, publish a new revision (an inference-only build of
    `base_model`, which must be weights the node does not hold: a swap to weights it holds needs no
    load), and time the build's completion to the node holding the new revision ready (polled on
    the admin API every 10 ms), which is when requests start going to it, and to its first answer
    (`X-Model-Revision`), which adds that request's own translation time. The node's fetch and
    load times come from its metrics; every failed request is counted."""

    async def run() -> dict[str, Any]:
        client = RestClient(system.rest_url, system.api_key, engine_id, clients)
        stop = asyncio.Event()
        failures: list[str] = []

        async def caller(start: int) -> None:
            index = start
            while not stop.is_set():
                try:
                    await client.send(workload.sentences[index % len(workload.sentences)])
                except Exception as exc:  # every failure counts, whatever its kind
                    failures.append(f"{type(exc).__name__}: {exc}"[:200])
                index += clients

        callers = [asyncio.create_task(caller(i)) for i in range(clients)]
        await asyncio.sleep(1.0)
        before = system.node_figures()
        revision, completed = await asyncio.to_thread(system.build, engine_id, base_model)
        ready = await asyncio.to_thread(system.wait_until_ready, engine_id, revision)
        deadline = time.monotonic() + 300
        seen = 0
        while time.monotonic() < deadline:
            if any(rev >= revision for _, rev in client.revisions[seen:]):
                break
            seen = len(client.revisions)
            await asyncio.sleep(0.005)
        stop.set()
        await asyncio.gather(*callers)
        await client.close()
        figures = system.node_figures() - before
        first = min((at for at, rev in client.revisions if rev >= revision), default=None)
        return {
            "clients": clients,
            "requests": len(client.revisions) + len(failures),
            "failed": len(failures),
            "errors": failures[:3],
            "revision": revision,
            "completed_to_ready_s": ready - completed,
            "completed_to_first_answer_s": None if first is None else first - completed,
            "node_fetch_s": figures.fetch_s,
            "node_load_s": figures.load_s - figures.fetch_s,
            "ready_after_files_local_s": ready - completed - figures.fetch_s,
        }

    return asyncio.run(run())


IDLE_S = 15.0
"""Long enough for every periodic task of the API service (webhook polls, heartbeats) to run many
times; CPU times tick at 10 ms, so this resolves about 0.7 ms per s."""


def idle_cpu(system: System, seconds: float = IDLE_S) -> dict[str, float]:
    """CPU milliseconds per second the API service and the node spend with a node connected and a
    model loaded but no request: the background work that the per-request CPU figures of a slow
    run also carry."""
    before, start = system.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    after, elapsed = system.cpu_seconds(), time.monotonic() - start
    return {f"{name}_ms_per_s": 1000 * (after[name] - before[name]) / elapsed for name in ("api", "node")}


def model_bytes(folder: Path) -> int:
    """What the node loads: the CTranslate2 files, without the training checkpoint."""
    return sum(
        p.stat().st_size for p in folder.rglob("*") if p.is_file() and TRAINING_CHECKPOINT not in p.relative_to(folder).parts
    )  # fmt: skip


def memory(system: System, base_rss: int, base_models: list[str], folder: Path) -> dict[str, Any]:
    """The node's resident memory against the models it holds. After serving (so one batch's
    working memory is in use), one engine on each of `base_models` is loaded, each a copy of the
    weights with an identity of its own (`distinct_base_model`); the growth per model byte is what
    holding models costs, and what one model cost beyond it is the fixed base: the process itself
    and the batch workspace. (Engines on the same weights cost nothing more: the shared-weights
    scenario.)"""
    size = model_bytes(folder)
    serving = system.node_rss_bytes()
    extra = len(base_models)
    for name in base_models:
        system.preload(system.create_engine(name))
    loaded = system.node_rss_bytes()
    per_model_byte = (loaded - serving) / (extra * size)
    return {
        "start_rss_mb": base_rss / MB,
        "model_mb": size / MB,
        "rss_one_model_mb": serving / MB,
        "models_held": 1 + extra,
        "rss_mb": loaded / MB,
        "rss_per_model_byte": per_model_byte,
        "fixed_base_mb": (serving - per_model_byte * size) / MB,
    }


def cold_load_from_s3(workload: Workload, source: ModelStore, prefix: str, tmp: Path) -> dict[str, Any]:
    """Copy the model to a moto S3 server on loopback, then do what a node does for a revision it
    has never seen: fetch and verify the files, then load them."""
    port = free_port()
    credentials = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **credentials},
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_for(endpoint)
        boto3.client("s3", endpoint_url=endpoint, **_boto_credentials(credentials)).create_bucket(
            Bucket="bench"
        )
        s3 = store_from_settings(
            Settings(
                home=tmp / "s3-home",
                store=StoreSettings(
                    url="s3://bench/models",
                    s3_endpoint_url=endpoint,
                    s3_region="us-east-1",
                    s3_access_key_id="bench",
                    s3_secret_access_key="bench",
                ),
            )
        )
        manifest, folder = fetch_folder(source, prefix, tmp / "s3-source", with_checkpoint=False)
        publish_folder(s3, prefix, folder, manifest.model_copy(update={"weights_from": None}))
        started = time.perf_counter()
        manifest, local = fetch_folder(s3, prefix, tmp / "s3-cold", with_checkpoint=False)
        fetched = time.perf_counter()
        model = NmtModel.load(local, manifest, workload.node)
        loaded = time.perf_counter()
        size = model_bytes(local)
        model.backend.unload()
        return {
            "size_mb": size / MB,
            "download_s": fetched - started,
            "download_mb_per_s": size / MB / (fetched - started),
            "load_s": loaded - fetched,
            "cold_load_s": loaded - started,
        }
    finally:
        server.terminate()
        server.wait(timeout=10)


def _boto_credentials(env: dict[str, str]) -> dict[str, str]:
    return {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "region_name": env["AWS_DEFAULT_REGION"]}  # fmt: skip


def _wait_for(endpoint: str, timeout_s: float = 30) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
