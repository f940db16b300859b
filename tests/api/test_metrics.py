from __future__ import annotations

import re

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from tests.api.conftest import RunningApi, create_engine, wait_for_build


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match[1] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match[3])
    return None


def test_metrics_count_rest_grpc_builds_and_queues(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    route = "/api/v1/translation/engines/{engine_id}"
    for _ in range(3):
        assert client.get(f"/translation/engines/{engine['id']}").status_code == 200
    assert client.get("/translation/engines/missing").status_code == 404
    client.post(f"/translation/engines/{engine['id']}/builds", json={})
    echo = create_engine(client, "echo")
    wait_for_build(client, client.post(f"/translation/engines/{echo['id']}/builds", json={}).json())
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    key = (("x-api-key", api.api_key()),)
    stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="Nmt"), metadata=key)
    with pytest.raises(grpc.RpcError):
        stub.Delete(engine_pb2.DeleteRequest(engine_id="missing"), metadata=key)

    scrape = httpx.get(f"{api.rest_url}/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    text = scrape.text

    get = {"method": "GET", "route": route}
    assert sample(text, "serval_api_http_requests_total", **get, status="200") == 3
    assert sample(text, "serval_api_http_requests_total", **get, status="404") == 1
    assert sample(text, "serval_api_http_request_duration_seconds_count", **get) == 4
    assert (
        sample(
            text,
            "serval_api_http_requests_total",
            method="POST",
            route="/api/v1/translation/engines",
            status="201",
        )
        == 2
    )

    queue = "/serval.translation.v1.TranslationEngineApi/GetQueueSize"
    delete = "/serval.translation.v1.TranslationEngineApi/Delete"
    assert sample(text, "serval_api_grpc_requests_total", method=queue, code="OK") == 1
    assert sample(text, "serval_api_grpc_requests_total", method=delete, code="NOT_FOUND") == 1
    assert sample(text, "serval_api_grpc_request_duration_seconds_count", method=queue) == 1

    assert sample(text, "serval_api_builds", state="Pending") == 1
    assert sample(text, "serval_api_builds", state="Completed") == 1
    assert sample(text, "serval_api_builds", state="Faulted") == 0
    assert sample(text, "serval_api_connected_inference_nodes") == 0
    assert sample(text, "serval_api_dispatch_queue_depth") == 0
    assert sample(text, "serval_api_build_job_queue_depth") == 0
    assert sample(text, "serval_api_long_polls_waiting") == 0
