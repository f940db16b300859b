from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.db.models import BuildRow
from tests.api.conftest import RunningApi, create_engine
from tests.helpers import wait_until


def job_stub(api: RunningApi) -> platform_pb2_grpc.TranslationPlatformApiStub:
    return platform_pb2_grpc.TranslationPlatformApiStub(api.channel)


def as_job(api: RunningApi) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {api.launcher.specs[-1].job_token}"),)


def stored_build(api: RunningApi, build_id: str) -> BuildRow:
    assert api.service.services is not None
    db = api.service.services.db

    async def read() -> BuildRow:
        async with db.session() as s:
            build = await s.get(BuildRow, build_id)
            assert build is not None
            return build

    return api.run(read())


def test_lifecycle_through_the_platform_api(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    build = client.post(f"{base}/builds", json={}).json()
    build_url = f"{base}/builds/{build['id']}"
    job = job_stub(api)

    api.wake_polls_only()
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.get, build_url, params={"min-revision": 2})
        wait_until(lambda: api.long_polls_waiting() == 1, 60, "the poll waiting")
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=as_job(api))
        woke = waiting.result(timeout=60)
    assert woke.status_code == 200
    assert woke.json()["state"] == "Active"
    assert woke.json()["revision"] == 2
    assert "dateStarted" in woke.json()

    job.UpdateBuildStatus(
        platform_pb2.UpdateBuildStatusRequest(build_id=build["id"], step=5, progress=0.5, message="training"),
        metadata=as_job(api),
    )
    status = client.get(build_url).json()
    assert (status["step"], status["progress"], status["message"], status["revision"]) == (
        5,
        0.5,
        "training",
        3,
    )

    job.BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=build["id"], corpus_size=7, confidence=42.5),
        metadata=as_job(api),
    )
    done = client.get(build_url).json()
    assert done["state"] == "Completed" and done["revision"] == 4 and "dateFinished" in done
    updated = client.get(base).json()
    assert (updated["modelRevision"], updated["corpusSize"], updated["confidence"]) == (1, 7, 42.5)
    assert updated["isBuilding"] is False

    job.BuildFaulted(
        platform_pb2.BuildFaultedRequest(build_id=build["id"], message="late"), metadata=as_job(api)
    )
    assert client.get(build_url).json()["state"] == "Completed"

    second = client.post(f"{base}/builds", json={})
    assert second.status_code == 201
    assert api.launcher.specs[-1].revision == 2


def test_current_build_long_poll_returns_the_finished_build(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    build = client.post(f"{base}/builds", json={}).json()
    api.wake_polls_only()
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.get, f"{base}/current-build", params={"min-revision": 2})
        wait_until(lambda: api.long_polls_waiting() == 1, 60, "the poll waiting")
        job_stub(api).BuildFaulted(
            platform_pb2.BuildFaultedRequest(build_id=build["id"], message="out of memory"),
            metadata=as_job(api),
        )
        woke = waiting.result(timeout=60)
    assert woke.status_code == 200
    assert (woke.json()["state"], woke.json()["message"]) == ("Faulted", "out of memory")

    late = client.get(f"{base}/current-build", params={"min-revision": 2})
    assert (late.status_code, late.json()["state"]) == (200, "Faulted")
    assert client.get(f"{base}/current-build", params={"min-revision": 99}).status_code == 204
    assert client.get(f"{base}/current-build").status_code == 204


def test_wrong_job_token_is_refused(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    job = job_stub(api)
    request = platform_pb2.BuildStartedRequest(build_id=build["id"])
    for metadata, code in (
        ((), grpc.StatusCode.UNAUTHENTICATED),
        ((("authorization", "Bearer not-the-token"),), grpc.StatusCode.PERMISSION_DENIED),
    ):
        try:
            job.BuildStarted(request, metadata=metadata)
        except grpc.RpcError as e:
            assert e.code() == code
        else:
            raise AssertionError("the call should have been refused")
    assert (
        client.get(f"/translation/engines/{engine['id']}/builds/{build['id']}").json()["state"] == "Pending"
    )


def test_restarting_returns_the_build_to_pending(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    job = job_stub(api)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=as_job(api))
    job.BuildRestarting(platform_pb2.BuildRestartingRequest(build_id=build["id"]), metadata=as_job(api))
    job.BuildCanceled(platform_pb2.BuildCanceledRequest(build_id=build["id"]), metadata=as_job(api))
    final = client.get(f"/translation/engines/{engine['id']}/builds/{build['id']}").json()
    assert (final["state"], final["revision"]) == ("Canceled", 4)
    assert client.get(f"/translation/engines/{engine['id']}").json()["modelRevision"] == 0


def test_phases_execution_data_and_corpus_size(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    other = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    build = client.post(f"{base}/builds", json={}).json()
    job, auth = job_stub(api), as_job(api)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build["id"]), metadata=auth)
    started = Timestamp()
    started.FromSeconds(1_800_000_000)
    job.UpdateBuildStatus(
        platform_pb2.UpdateBuildStatusRequest(
            build_id=build["id"],
            step=3,
            phases=[
                platform_pb2.Phase(
                    stage=platform_pb2.PHASE_STAGE_TRAIN, step=3, step_count=10, started=started
                ),
                platform_pb2.Phase(stage=platform_pb2.PHASE_STAGE_INFERENCE),
            ],
        ),
        metadata=auth,
    )
    job.UpdateBuildExecutionData(
        platform_pb2.UpdateBuildExecutionDataRequest(
            engine_id=engine["id"],
            build_id=build["id"],
            execution_data=platform_pb2.ExecutionData(train_count=120, warnings=["short corpus"]),
        ),
        metadata=auth,
    )
    job.UpdateTargetQuoteConvention(
        platform_pb2.UpdateTargetQuoteConventionRequest(
            engine_id=engine["id"], build_id=build["id"], target_quote_convention="standard_english"
        ),
        metadata=auth,
    )
    job.IncrementEngineCorpusSize(
        platform_pb2.IncrementEngineCorpusSizeRequest(engine_id=engine["id"], count=120), metadata=auth
    )

    status = client.get(f"{base}/builds/{build['id']}").json()
    assert status["phases"] == [
        {"stage": "Train", "step": 3, "stepCount": 10, "started": "2027-01-15T08:00:00Z"},
        {"stage": "Inference"},
    ]
    assert status["executionData"]["trainCount"] == 120
    assert status["executionData"]["warnings"] == ["short corpus"]
    assert stored_build(api, build["id"]).target_quote_convention == "standard_english"
    assert client.get(base).json()["corpusSize"] == 120

    for call in (
        lambda: job.IncrementEngineCorpusSize(
            platform_pb2.IncrementEngineCorpusSizeRequest(engine_id=other["id"], count=1), metadata=auth
        ),
        lambda: job.UpdateBuildExecutionData(
            platform_pb2.UpdateBuildExecutionDataRequest(engine_id=other["id"], build_id=build["id"]),
            metadata=auth,
        ),
    ):
        with pytest.raises(grpc.RpcError) as error:
            call()
        assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED, (
            "a job token reaches only its own engine"
        )
    assert client.get(f"/translation/engines/{other['id']}").json()["corpusSize"] == 0


def test_quote_convention_reports(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    other = create_engine(client)
    build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    job, auth = job_stub(api), as_job(api)

    def analysis(engine_id: str, *entries: platform_pb2.ParallelCorpusAnalysisResult) -> None:
        job.UpdateParallelCorpusAnalysis(
            platform_pb2.UpdateParallelCorpusAnalysisRequest(
                engine_id=engine_id, build_id=build["id"], parallel_corpus_analysis=entries
            ),
            metadata=auth,
        )

    result = platform_pb2.ParallelCorpusAnalysisResult
    analysis(
        engine["id"],
        result(parallel_corpus_id="pc1", target_quote_convention="standard_french"),
        result(parallel_corpus_id="pc2", target_quote_convention=""),
        result(
            parallel_corpus_id="pc3", target_quote_convention="not_a_convention", source_quote_convention="x"
        ),
    )
    assert [
        a.model_dump(by_alias=True, exclude_none=True) for a in stored_build(api, build["id"]).analysis or []
    ] == [
        {
            "parallelCorpusRef": "pc1",
            "targetQuoteConvention": "standard_french",
            "canDenormalizeQuotes": True,
        },
        {"parallelCorpusRef": "pc2", "targetQuoteConvention": "", "canDenormalizeQuotes": False},
        {
            "parallelCorpusRef": "pc3",
            "targetQuoteConvention": "not_a_convention",
            "canDenormalizeQuotes": False,
            "sourceQuoteConvention": "x",
        },
    ]
    job.UpdateTargetQuoteConvention(
        platform_pb2.UpdateTargetQuoteConventionRequest(engine_id=engine["id"], build_id=build["id"]),
        metadata=auth,
    )
    assert stored_build(api, build["id"]).target_quote_convention is None, "no convention found"

    for call, code in (
        (lambda: analysis(other["id"]), grpc.StatusCode.PERMISSION_DENIED),
        (lambda: analysis(engine["id"], result(parallel_corpus_id="")), grpc.StatusCode.INVALID_ARGUMENT),
        (
            lambda: analysis(engine["id"], result(parallel_corpus_id="pc", target_quote_convention="x" * 65)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ):
        with pytest.raises(grpc.RpcError) as error:
            call()
        assert error.value.code() == code
    with pytest.raises(grpc.RpcError) as error:
        job.UpdateParallelCorpusAnalysis(
            platform_pb2.UpdateParallelCorpusAnalysisRequest(engine_id=engine["id"], build_id=build["id"]),
            metadata=(("authorization", "Bearer wrong"),),
        )
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
