from __future__ import annotations

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2 as std_health_pb2
from grpc_health.v1 import health_pb2_grpc as std_health_pb2_grpc

from serval.health.v1 import health_pb2, health_pb2_grpc
from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from tests.api.conftest import MAX_SEGMENT_CHARS, RunningApi, wait_for_build

ENGINE_ID = "0123456789abcdef01234567"


@pytest.fixture
def stub(api: RunningApi) -> engine_pb2_grpc.TranslationEngineApiStub:
    return engine_pb2_grpc.TranslationEngineApiStub(api.channel)


@pytest.fixture
def key(api: RunningApi) -> tuple[tuple[str, str]]:
    return (("x-api-key", api.api_key()),)


def code_of(call: object, *args: object, **kwargs: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as error:
        call(*args, **kwargs)  # type: ignore[operator]
    code: grpc.StatusCode = error.value.code()
    return code


def create(stub: engine_pb2_grpc.TranslationEngineApiStub, key: object, engine_type: str = "Nmt") -> None:
    stub.Create(
        engine_pb2.CreateRequest(
            engine_type=engine_type, engine_id=ENGINE_ID, source_language="en", target_language="sw"
        ),
        metadata=key,
    )


def test_create_with_caller_given_id_is_visible_over_rest(
    api: RunningApi, stub: engine_pb2_grpc.TranslationEngineApiStub
) -> None:
    key = api.api_key()
    create(stub, (("x-api-key", key),))
    with httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key}) as client:
        engine = client.get(f"/translation/engines/{ENGINE_ID}").json()
    assert (engine["type"], engine["sourceLanguage"], engine["targetLanguage"]) == ("nmt", "en", "sw")
    assert code_of(stub.Create, engine_pb2.CreateRequest(
        engine_type="Nmt", engine_id=ENGINE_ID, source_language="en", target_language="sw"
    ), metadata=(("x-api-key", key),)) == grpc.StatusCode.ALREADY_EXISTS  # fmt: skip


def test_create_rejects_bad_type_and_language(
    stub: engine_pb2_grpc.TranslationEngineApiStub, key: object
) -> None:
    not_served = engine_pb2.CreateRequest(
        engine_type="Statistical", engine_id="e1", source_language="en", target_language="sw"
    )
    assert code_of(stub.Create, not_served, metadata=key) == grpc.StatusCode.UNIMPLEMENTED
    bad_type = engine_pb2.CreateRequest(
        engine_type="Smt", engine_id="e1", source_language="en", target_language="sw"
    )
    assert code_of(stub.Create, bad_type, metadata=key) == grpc.StatusCode.INVALID_ARGUMENT
    bad_language = engine_pb2.CreateRequest(
        engine_type="Nmt", engine_id="e1", source_language="!!", target_language="sw"
    )
    assert code_of(stub.Create, bad_language, metadata=key) == grpc.StatusCode.INVALID_ARGUMENT


def test_translate_status_codes(
    api: RunningApi, stub: engine_pb2_grpc.TranslationEngineApiStub, key: object
) -> None:
    def translate(segment: str, n: int = 0, engine_id: str = ENGINE_ID) -> engine_pb2.TranslateResponse:
        request = engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine_id, segment=segment, n=n)
        response: engine_pb2.TranslateResponse = stub.Translate(request, metadata=key)
        return response

    assert code_of(translate, "hello", engine_id="missing") == grpc.StatusCode.NOT_FOUND
    create(stub, key)
    assert code_of(translate, "hello") == grpc.StatusCode.FAILED_PRECONDITION
    assert code_of(translate, "") == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(translate, "x" * (MAX_SEGMENT_CHARS + 1)) == grpc.StatusCode.INVALID_ARGUMENT
    with api.client(owner="owner-b") as other:
        assert other.post(f"/translation/engines/{ENGINE_ID}/translate", json="hi").status_code == 403
    stranger = (("x-api-key", api.api_key("owner-b")),)
    theirs = engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=ENGINE_ID, segment="hi")
    assert code_of(stub.Translate, theirs, metadata=stranger) == grpc.StatusCode.PERMISSION_DENIED


def test_echo_engine_build_and_translate(
    api: RunningApi, stub: engine_pb2_grpc.TranslationEngineApiStub, key: object
) -> None:
    create(stub, key, engine_type="echo")
    stub.StartBuild(
        engine_pb2.StartBuildRequest(engine_type="Echo", engine_id=ENGINE_ID, build_id="b1", options="{}"),
        metadata=key,
    )
    with api.client() as client:
        started = client.get(f"/translation/engines/{ENGINE_ID}/builds/b1").json()
        assert wait_for_build(client, started)["state"] == "Completed"
    response = stub.Translate(
        engine_pb2.TranslateRequest(engine_type="Echo", engine_id=ENGINE_ID, segment="Hi there", n=2),
        metadata=key,
    )
    assert len(response.results) == 2
    assert list(response.results[0].target_tokens) == ["Hi", "there"]
    assert [(a.source_index, a.target_index) for a in response.results[0].alignment] == [(0, 0), (1, 1)]
    word_graph = engine_pb2.GetWordGraphRequest(engine_type="Echo", engine_id=ENGINE_ID, segment="Hi there")
    graph = stub.GetWordGraph(word_graph, metadata=key).word_graph
    assert [list(arc.target_tokens) for arc in graph.arcs] == [["Hi"], ["there"]]
    assert list(graph.final_states) == [2]


def test_start_and_cancel_build(
    api: RunningApi, stub: engine_pb2_grpc.TranslationEngineApiStub, key: object
) -> None:
    create(stub, key)
    start = engine_pb2.StartBuildRequest(
        engine_type="Nmt", engine_id=ENGINE_ID, build_id="build-1", options='{"max_steps": 3}'
    )
    stub.StartBuild(start, metadata=key)
    assert api.launcher.specs[-1].build_id == "build-1"
    assert api.launcher.specs[-1].options_json == '{"max_steps": 3}'
    again = engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=ENGINE_ID, build_id="build-2")
    assert code_of(stub.StartBuild, again, metadata=key) == grpc.StatusCode.ALREADY_EXISTS
    bad_options = engine_pb2.StartBuildRequest(
        engine_type="Nmt", engine_id=ENGINE_ID, build_id="b", options="{"
    )
    assert code_of(stub.StartBuild, bad_options, metadata=key) == grpc.StatusCode.INVALID_ARGUMENT

    cancel = engine_pb2.CancelBuildRequest(engine_type="Nmt", engine_id=ENGINE_ID)
    assert stub.CancelBuild(cancel, metadata=key).build_id == "build-1"
    assert api.launcher.canceled == ["build-1"]
    assert code_of(stub.CancelBuild, cancel, metadata=key) == grpc.StatusCode.NOT_FOUND


def test_update_and_delete(stub: engine_pb2_grpc.TranslationEngineApiStub, key: object) -> None:
    create(stub, key)
    stub.Update(
        engine_pb2.UpdateRequest(engine_type="Nmt", engine_id=ENGINE_ID, target_language="fr"), metadata=key
    )
    stub.Delete(engine_pb2.DeleteRequest(engine_type="Nmt", engine_id=ENGINE_ID), metadata=key)
    delete = engine_pb2.DeleteRequest(engine_type="Nmt", engine_id=ENGINE_ID)
    assert code_of(stub.Delete, delete, metadata=key) == grpc.StatusCode.NOT_FOUND


def test_language_info_and_queue_size(stub: engine_pb2_grpc.TranslationEngineApiStub, key: object) -> None:
    info = stub.GetLanguageInfo(
        engine_pb2.GetLanguageInfoRequest(engine_type="Nmt", language="en"), metadata=key
    )
    assert (info.internal_code, info.is_native) == ("eng_Latn", True)
    unknown = stub.GetLanguageInfo(
        engine_pb2.GetLanguageInfoRequest(engine_type="Nmt", language="quc"), metadata=key
    )
    assert unknown.is_native is False
    assert stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="Nmt"), metadata=key).size == 0


def test_health_services(api: RunningApi) -> None:
    serval = health_pb2_grpc.HealthApiStub(api.channel).HealthCheck(empty_pb2.Empty())
    assert serval.status == health_pb2.DEGRADED
    assert (serval.data["database"], serval.data["nodes"], serval.data["nodes.connected"]) == (
        "Healthy",
        "Degraded",
        "0",
    )
    assert not serval.HasField("error")
    standard = std_health_pb2_grpc.HealthStub(api.channel).Check(
        std_health_pb2.HealthCheckRequest(service="")
    )
    assert standard.status == std_health_pb2.HealthCheckResponse.SERVING
