from __future__ import annotations

import threading
import time

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.test_platform_api import as_job, job_stub
from tests.helpers import metrics_text


def engine_stub(api: RunningApi) -> engine_pb2_grpc.TranslationEngineApiStub:
    return engine_pb2_grpc.TranslationEngineApiStub(api.channel)


def test_watch_a_build_from_pending_to_completed(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    stream = engine_stub(api).WatchBuild(
        engine_pb2.WatchBuildRequest(engine_type="Nmt", engine_id=engine["id"]),
        metadata=(("x-api-key", api.api_key()),),
        timeout=10,
    )
    first = next(stream)
    assert (first.build_id, first.revision, first.state) == (build["id"], 1, "Pending")
    assert not first.HasField("progress")

    job = job_stub(api)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=as_job(api))
    active = next(stream)
    assert (active.revision, active.state) == (2, "Active")
    job.UpdateBuildStatus(
        platform_pb2.UpdateBuildStatusRequest(
            build_id=build["id"], step=3, progress=0.25, message="training"
        ),
        metadata=as_job(api),
    )
    progress = next(stream)
    assert (progress.revision, progress.step, progress.progress, progress.message) == (3, 3, 0.25, "training")
    job.BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=build["id"], corpus_size=2, confidence=50),
        metadata=as_job(api),
    )
    done = next(stream)
    assert (done.revision, done.state, done.engine_model_revision) == (4, "Completed", 1)
    with pytest.raises(StopIteration):
        next(stream)
    assert stream.code() == grpc.StatusCode.OK


def test_watch_from_a_revision_and_unknown_builds(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client, "echo")
    build = wait_for_build(client, client.post(f"/translation/engines/{engine['id']}/builds", json={}).json())
    key = (("x-api-key", api.api_key()),)
    updates = list(
        engine_stub(api).WatchBuild(
            engine_pb2.WatchBuildRequest(engine_id=engine["id"], build_id=build["id"]),
            metadata=key,
            timeout=5,
        )
    )
    assert [(u.state, u.engine_model_revision) for u in updates] == [("Completed", 1)]
    later = engine_pb2.WatchBuildRequest(
        engine_id=engine["id"], build_id=build["id"], min_revision=build["revision"] + 1
    )
    assert list(engine_stub(api).WatchBuild(later, metadata=key, timeout=5)) == []
    for request in (
        engine_pb2.WatchBuildRequest(engine_id=engine["id"]),
        engine_pb2.WatchBuildRequest(engine_id=engine["id"], build_id="nope"),
        engine_pb2.WatchBuildRequest(engine_id="nope"),
    ):
        with pytest.raises(grpc.RpcError) as error:
            list(engine_stub(api).WatchBuild(request, metadata=key, timeout=5))
        assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_client_cancel_stops_the_watch(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    client.post(f"/translation/engines/{engine['id']}/builds", json={})
    stream = engine_stub(api).WatchBuild(
        engine_pb2.WatchBuildRequest(engine_id=engine["id"]), metadata=(("x-api-key", api.api_key()),)
    )
    assert next(stream).state == "Pending"
    stream.cancel()
    finished = threading.Event()
    stream.add_done_callback(lambda _call: finished.set())
    assert finished.wait(5)
    method = "/serval.translation.v1.TranslationEngineApi/WatchBuild"
    series = f'serval_api_grpc_requests_total{{code="CANCELLED",method="{method}"}} 1.0'
    deadline = time.monotonic() + 5
    while series not in metrics_text(api.rest_url):
        assert time.monotonic() < deadline, "the server never saw the cancel"
        time.sleep(0.05)
