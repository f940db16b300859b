"""Health as Serval's client reads it: `status/health`, `status/ping`, `status/deployment-info`,
and the gRPC HealthApi built from the same checks."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import httpx
import pytest
from google.protobuf import empty_pb2

from serval.health.v1 import health_pb2, health_pb2_grpc
from serval_api.auth import READ_STATUS
from serval_api.db import upsert_node
from serval_api.rest.status import timespan
from serval_api.service import status
from serval_api.service.status import describe_exception
from serval_common.settings import Settings
from serval_common.store import StoreUnavailable
from tests.api.conftest import RunningApi

TIMESPAN = re.compile(r"^(\d+\.)?\d{2}:[0-5]\d:[0-5]\d\.\d{7}$")
STATUSES = ("Healthy", "Degraded", "Unhealthy")
CHECKS = {"database", "modelStore", "nodes", "jobLauncher"}
SECRET = "hunter2-s3cret"


def assert_report(report: dict[str, Any]) -> None:
    """`HealthReport`: status, totalDuration and results required; each entry's status and duration too."""
    assert report["status"] in STATUSES
    assert TIMESPAN.match(report["totalDuration"]), report["totalDuration"]
    assert isinstance(report["results"], dict)
    for name, entry in report["results"].items():
        assert entry["status"] in STATUSES, name
        assert TIMESPAN.match(entry["duration"]), entry["duration"]
        for optional in ("description", "exception"):
            assert isinstance(entry.get(optional, ""), str), (name, optional)
        assert all(isinstance(v, str) for v in entry.get("data", {}).values()), name
    worst = min((STATUSES.index(e["status"]) for e in report["results"].values()), default=0)
    assert report["status"] == STATUSES[max(STATUSES.index(report["status"]), worst)]


@pytest.fixture
def client(api: RunningApi) -> Iterator[httpx.Client]:
    """`status/health` needs `read:status`, as Serval's (test_auth.py checks the refusals)."""
    with api.client(scopes=(READ_STATUS,)) as c:
        yield c


class BrokenStore:
    def __init__(self, delay_s: float = 0.0, released: threading.Event | None = None) -> None:
        self.delay_s = delay_s
        self.released = released or threading.Event()

    def exists(self, key: str) -> bool:
        self.released.wait(self.delay_s)
        raise StoreUnavailable(
            f"could not reach https://AKIAEXAMPLE:{SECRET}@s3.example/bucket/{key}"
            f"?X-Amz-Signature={SECRET} (aws_secret_access_key={SECRET})"
        )


def test_health_checks_each_dependency_and_is_degraded_without_nodes(client: httpx.Client) -> None:
    answer = client.get("/status/health")
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert_report(report)
    assert report["status"] == "Degraded"
    assert set(report["results"]) == CHECKS
    results = report["results"]
    assert {name: results[name]["status"] for name in CHECKS} == {
        "database": "Healthy",
        "modelStore": "Healthy",
        "nodes": "Degraded",
        "jobLauncher": "Healthy",
    }
    assert "cannot translate" in results["nodes"]["description"]
    assert results["nodes"]["data"] == {"connected": "0", "queuedRequests": "0"}
    assert results["jobLauncher"]["data"] == {"queueDepth": "0"}
    assert not any("exception" in entry for entry in results.values())


def test_health_is_healthy_with_a_node(api: RunningApi, client: httpx.Client) -> None:
    assert api.service.services is not None
    api.run(upsert_node(api.service.services.db, "gpu-1", device="cuda:0", session_id="s1", free_slots=8))
    report = client.get("/status/health").json()
    assert_report(report)
    assert (report["status"], report["results"]["nodes"]["status"]) == ("Healthy", "Healthy")
    assert report["results"]["nodes"]["data"]["connected"] == "1"
    reply = health_pb2_grpc.HealthApiStub(api.channel).HealthCheck(empty_pb2.Empty())
    assert (reply.status, reply.data["nodes"], reply.data["nodes.connected"]) == (
        health_pb2.HEALTHY,
        "Healthy",
        "1",
    )


def test_an_unreachable_store_is_unhealthy_without_leaking_secrets(
    api: RunningApi, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api.service.services is not None
    monkeypatch.setattr(api.service.services, "store", BrokenStore())
    answer = client.get("/status/health")
    assert answer.status_code == 503, answer.text
    report = answer.json()
    assert_report(report)
    store = report["results"]["modelStore"]
    assert (report["status"], store["status"]) == ("Unhealthy", "Unhealthy")
    assert report["results"]["database"]["status"] == "Healthy"
    assert store["exception"].startswith("StoreUnavailable: could not reach <url>")
    assert SECRET not in answer.text and "AKIAEXAMPLE" not in answer.text

    reply = health_pb2_grpc.HealthApiStub(api.channel).HealthCheck(empty_pb2.Empty())
    assert (reply.status, reply.data["modelStore"], reply.data["database"]) == (
        health_pb2.UNHEALTHY,
        "Unhealthy",
        "Healthy",
    )
    assert reply.error.startswith("modelStore: StoreUnavailable") and SECRET not in reply.error


def test_a_check_that_hangs_is_cut_short(
    api: RunningApi, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status, "CHECK_TIMEOUT_S", 0.2)
    # The check hangs until the test releases it: an answer at all means it was cut short.
    released = threading.Event()
    assert api.service.services is not None
    monkeypatch.setattr(api.service.services, "store", BrokenStore(600, released))
    try:
        answer = client.get("/status/health")
    finally:
        released.set()
    assert answer.status_code == 503
    store = answer.json()["results"]["modelStore"]
    assert (store["status"], store["exception"]) == ("Unhealthy", "TimeoutError")
    assert "0.2 s" in store["description"]


def test_ping_and_deployment_info_are_public(api: RunningApi) -> None:
    with httpx.Client(base_url=f"{api.rest_url}/api/v1", timeout=60) as anonymous:
        ping = anonymous.get("/status/ping")
        assert ping.status_code == 200
        assert_report(ping.json())
        assert ping.json() == {"status": "Healthy", "totalDuration": "00:00:00.0000000", "results": {}}
        assert anonymous.get("/status/health").status_code == 401

        info = anonymous.get("/status/deployment-info")
        assert info.status_code == 200
        assert info.json() == {
            "deploymentVersion": version("serval-live"),
            "aspNetCoreEnvironment": "Production",
        }
        api.service.settings.api.deployment_environment = "Staging"
        assert anonymous.get("/status/deployment-info").json()["aspNetCoreEnvironment"] == "Staging"


def test_the_environment_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVAL_API__DEPLOYMENT_ENVIRONMENT", "Development")
    assert Settings().api.deployment_environment == "Development"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "00:00:00.0000000"),
        (0.0123456, "00:00:00.0123456"),
        (61.5, "00:01:01.5000000"),
        (3725.25, "01:02:05.2500000"),
        (90061.1, "1.01:01:01.1000000"),
    ],
)
def test_durations_are_timespans(seconds: float, text: str) -> None:
    assert timespan(seconds) == text


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (
            ConnectionError("connect to postgresql://serval:hunter2@db:5432/serval failed"),
            "ConnectionError: connect to <url> failed",
        ),
        (
            RuntimeError("login failed: password='hunter2' user=serval"),
            "RuntimeError: login failed: password=*** user=serval",
        ),
        (OSError(), "OSError"),
        (ValueError("x" * 1000), None),
    ],
)
def test_exceptions_are_described_without_secrets(error: Exception, shown: str | None) -> None:
    described = describe_exception(error)
    if shown is not None:
        assert described == shown
    assert "hunter2" not in described and len(described) <= status.MAX_EXCEPTION_CHARS
