"""The full path under test: an API service and one inference node, started as separate processes on
loopback ports (as `serval api` and `serval node` run in production), an engine on the workload's
base model, and the node's own Prometheus figures."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

from serval_api.auth import ADMIN, READ_ENGINES
from serval_api.service.keys import create_api_key
from serval_cli import processes
from serval_cli.admin import with_db
from serval_cli.bootstrap import create_credentials
from serval_common.settings import NodeSettings, Settings, StoreSettings

BUILD_TIMEOUT_S = 600
OWNER = "bench"
"""The owner of the bench's API key and engines."""
REQUEST_TIMEOUT_S = 600


_FIGURES = {
    "batches": "serval_node_batch_size_count",
    "batched_requests": "serval_node_batch_size_sum",
    "batch_engines": "serval_node_batch_engines_sum",
    "loads": "serval_node_model_load_seconds_count",
    "target_tokens": "serval_node_target_tokens_total",
    "fetch_s": "serval_node_model_fetch_seconds_sum",
    "load_s": "serval_node_model_load_seconds_sum",
    "engine_s": "serval_node_inference_seconds_sum",
}


@dataclass
class NodeFigures:
    """Cumulative node counters, read from its /metrics page (`load_s` includes `fetch_s`)."""

    batches: float
    batched_requests: float
    batch_engines: float
    """Distinct engines summed over batches."""
    loads: float
    """Sets of weights fetched and loaded."""
    target_tokens: float
    fetch_s: float
    load_s: float
    engine_s: float
    """Seconds the backend spent on batches (timed on the batch thread, around `translate`)."""

    def __sub__(self, other: NodeFigures) -> NodeFigures:
        return NodeFigures(**{name: getattr(self, name) - getattr(other, name) for name in _FIGURES})


@dataclass
class System:
    rest: processes.RestClient
    admin: processes.RestClient
    api_key: str
    grpc_target: str
    rest_url: str
    metrics_url: str
    api: subprocess.Popen[bytes]
    node: subprocess.Popen[bytes]
    home: Path
    more_nodes: tuple[subprocess.Popen[bytes], ...] = ()
    """Nodes beyond the first (`running_system(nodes=...)`), serving the same store."""

    def node_figures(self) -> NodeFigures:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        values = dict.fromkeys(_FIGURES.values(), 0.0)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in values:
                    values[sample.name] += sample.value
        return NodeFigures(**{name: values[metric] for name, metric in _FIGURES.items()})

    def node_models(self) -> list[dict[str, Any]]:
        """The models the (only) node holds, as the admin API lists them: engineId, revision, state."""
        nodes = self.admin.expect(200, "GET", "/api/v1/admin/nodes")
        return [model for node in nodes if node["status"] == "serving" for model in node["models"]]

    def wait_until_ready(self, engine_id: str, revision: int, timeout_s: float = 300) -> float:
        """Poll every 10 ms until the node holds the revision ready; the monotonic time it was seen."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(
                m["engineId"] == engine_id and m["revision"] == revision and m["state"] == "ready"
                for m in self.node_models()
            ):
                return time.monotonic()
            time.sleep(0.01)
        raise RuntimeError(f"revision {revision} of engine {engine_id} was not ready within {timeout_s:g} s")

    def preload(self, engine_id: str) -> None:
        """Have the node load the engine's current revision (the admin API's pre-warm)."""
        nodes = self.admin.expect(200, "GET", "/api/v1/admin/nodes")
        node_id = next(node["id"] for node in nodes if node["status"] == "serving")
        self.admin.expect(202, "POST", f"/api/v1/admin/nodes/{node_id}/models", {"engineId": engine_id})
        engine = self.rest.expect(200, "GET", f"/api/v1/translation/engines/{engine_id}")
        self.wait_until_ready(engine_id, int(engine["modelRevision"]))

    def bound_key(self, engine_id: str) -> str:
        """An API key of the bench's owner bound to `engine_id`: the SIL Converters and LibreTranslate
        dialects translate with that engine."""
        created = self.admin.expect(
            201,
            "POST",
            "/api/v1/admin/api-keys",
            {"owner": OWNER, "scopes": [READ_ENGINES], "engineId": engine_id},
        )
        return str(created["key"])

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each process has used so far: this one (the clients), the API
        service and the nodes (all together)."""
        nodes = (self.node, *self.more_nodes)
        return {
            "clients": sum(psutil.Process(os.getpid()).cpu_times()[:2]),
            "api": sum(psutil.Process(self.api.pid).cpu_times()[:2]),
            "node": sum(sum(psutil.Process(node.pid).cpu_times()[:2]) for node in nodes),
        }

    def node_rss_bytes(self) -> int:
        return int(psutil.Process(self.node.pid).memory_info().rss)

    def create_engine(self, base_model: str) -> str:
        """An en→sw engine whose first (inference-only) build has completed: it serves `base_model`."""
        engine = self.rest.expect(
            201, "POST", "/api/v1/translation/engines",
            {"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt", "name": f"bench {base_model}"},
        )  # fmt: skip
        self.build(engine["id"], base_model)
        return str(engine["id"])

    def build(self, engine_id: str, base_model: str) -> tuple[int, float]:
        """An inference-only build; returns the engine's new model revision and the monotonic time
        the build was seen completed."""
        path = f"/api/v1/translation/engines/{engine_id}/builds"
        build = self.rest.expect(201, "POST", path, {"trainOn": [], "options": {"baseModel": base_model}})
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        while build["state"] in ("Pending", "Active"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"build {build['id']} did not finish in {BUILD_TIMEOUT_S} s")
            code, payload = self.rest.call(
                "GET", f"{path}/{build['id']}?min-revision={build['revision'] + 1}", timeout_s=60
            )
            build = payload if code == 200 else build
        completed = time.monotonic()
        if build["state"] != "Completed":
            raise RuntimeError(f"build {build['id']} ended {build['state']}: {build.get('message')}")
        engine = self.rest.expect(200, "GET", f"/api/v1/translation/engines/{engine_id}")
        return int(engine["modelRevision"]), completed


@contextlib.contextmanager
def running_system(
    home: Path, store_url: str, node: NodeSettings, extra_env: dict[str, str] | None = None, nodes: int = 1
) -> Iterator[System]:
    """Start the API service and `nodes` nodes with `node`'s decoding, batching and thread
    settings (the first's metrics are `System.metrics_url`)."""
    settings = Settings(home=home, store=StoreSettings(url=store_url))
    api_key, node_token = create_credentials(settings, OWNER)
    _, admin_key = with_db(
        home, settings.resolved_database_url, lambda db: create_api_key(db, "bench-admin", (ADMIN,))
    )
    grpc_port, rest_port, metrics_port = processes.free_port(), processes.free_port(), processes.free_port()
    env = {
        "SERVAL_STORE__URL": store_url,
        "SERVAL_LOG_LEVEL": "WARNING",
        # 64 verses queued for the 600M shape on 2 CPU cores wait a minute or more for their batch.
        "SERVAL_API__REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
        **(extra_env or {}),
    }
    node_env = {
        **env,
        "SERVAL_NODE__TOKEN": node_token,
        "SERVAL_NODE__METRICS_PORT": str(metrics_port),
        **{f"SERVAL_NODE__{name.upper()}": str(getattr(node, name)) for name in _NODE_FIELDS},
    }
    api = processes.start(
        ["api", "--home", str(home), "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
        home / "api.log",
        env,
    )
    node_process = processes.start(
        ["node", "--home", str(home), "--api-address", f"127.0.0.1:{grpc_port}"], home / "node.log", node_env
    )
    more_nodes = tuple(
        processes.start(
            ["node", "--home", str(home / f"node-{i}"), "--api-address", f"127.0.0.1:{grpc_port}"],
            home / f"node-{i}.log",
            {**node_env, "SERVAL_NODE__NODE_ID": f"bench-node-{i}", "SERVAL_NODE__METRICS_PORT": "0"},
        )
        for i in range(2, nodes + 1)
    )
    try:
        rest = processes.RestClient(f"http://127.0.0.1:{rest_port}", api_key)
        rest.wait_until_up(api)
        for process in (node_process, *more_nodes):
            rest.wait_for_node(process)
        admin = processes.RestClient(f"http://127.0.0.1:{rest_port}", admin_key)
        deadline = time.monotonic() + 60
        while len(admin.expect(200, "GET", "/api/v1/admin/nodes")) < nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{nodes} nodes did not register within 60 s")
            time.sleep(0.2)
        yield System(
            rest, admin, api_key, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{rest_port}",
            f"http://127.0.0.1:{metrics_port}/metrics", api, node_process, home, more_nodes,
        )  # fmt: skip
    finally:
        for process in (*more_nodes, node_process):
            processes.stop(process)
        processes.stop(api)


_NODE_FIELDS = (
    "device",
    "compute_type",
    "intra_threads",
    "inter_threads",
    "max_batch_size",
    "max_batch_wait_ms",
    "beam_size",
    "max_decoding_length",
)
