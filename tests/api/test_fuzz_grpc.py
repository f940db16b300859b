"""Property-based fuzzing of every client-facing gRPC method: TranslationEngineApi and
WordAlignmentEngineApi with a valid API key, TranslationPlatformApi and WordAlignmentPlatformApi
with a running build's job token. Random request messages, built
from each method's descriptor, end with a status other than UNKNOWN, INTERNAL or DATA_LOSS, and
the service still answers a normal call afterwards.

`messages` builds such random messages for any descriptor; test_fuzz_node_stream.py uses it too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2
from serval.word_alignment.v1 import engine_pb2 as wa_engine_pb2
from serval.word_alignment.v1 import platform_pb2 as wa_platform_pb2
from serval_api.auth import ALL_SCOPES
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.helpers import fresh_database

pytestmark = [pytest.mark.database, pytest.mark.timeout(300)]

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
CRASHES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS}
CALL_TIMEOUT_S = 10.0
STREAM_TIMEOUT_S = 0.5
"""WatchBuild follows a build until it finishes: the fuzz reads it this long, then hangs up."""

Hints = Mapping[str, st.SearchStrategy[Any]]

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_SHORT_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", " ", "\x00", "../..", ".", "a/b", "x" * 65, "é" * 70, "\u202e\ufeff"]),
)
_HUGE_TEXT = st.builds(
    lambda char, count: char * count, st.characters(codec="utf-8"), st.sampled_from([201, 2001, 70_000])
)


def messages(
    descriptor: Descriptor, hints: Hints | None = None, *, depth: int = 0
) -> st.SearchStrategy[Message]:
    """Random messages of `descriptor`'s type: any subset of its fields set, strings empty, unicode
    or huge (at the top level), integers at and between their extremes, any double, known and
    unknown enum numbers, short repeated fields and maps, nested messages three levels deep.
    `hints` (by field name) give a field real values (an engine id that exists) three times in four;
    a hinted field is always set, so most messages reach past the lookup of what they name."""
    hints = hints or {}
    fields = {
        field.name: _field(field, hints, depth)
        for field in descriptor.fields
        if field.message_type is None or depth < 3
    }
    hinted = {name: fields.pop(name) for name in list(fields) if name in hints}
    cls = GetMessageClass(descriptor)
    return st.fixed_dictionaries(hinted, optional=fields).map(lambda values: _build(cls, values))


def _field(field: FieldDescriptor, hints: Hints, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = (field.message_type.fields_by_name[name] for name in ("key", "value"))
        return st.dictionaries(_single(key, hints, depth + 1), _single(value, hints, depth + 1), max_size=3)
    single = _single(field, hints, depth)
    if field.is_repeated:
        return st.lists(single, max_size=3)
    return single


def _single(field: FieldDescriptor, hints: Hints, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None:
        return messages(field.message_type, hints, depth=depth + 1)
    if field.type == FieldDescriptor.TYPE_STRING:
        values = st.one_of(_SHORT_TEXT, _HUGE_TEXT) if depth == 0 else _SHORT_TEXT
    elif field.type == FieldDescriptor.TYPE_BYTES:
        values = st.binary(max_size=20)
    elif field.type == FieldDescriptor.TYPE_BOOL:
        values = st.booleans()
    elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        values = st.floats(width=64 if field.type == FieldDescriptor.TYPE_DOUBLE else 32)
    elif field.type == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        values = st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    else:
        low, high = _INT_RANGES[field.type]
        values = st.one_of(
            st.sampled_from([low, high]),
            st.sampled_from([0, 1, -1 if low < 0 else 2]),
            st.integers(low, high),
        )
    hint = hints.get(field.name)
    if hint is None:
        return values
    real: st.SearchStrategy[Any] = hint
    return st.sampled_from([True, True, True, False]).flatmap(lambda use_real: real if use_real else values)


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        field = cls.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif isinstance(value, list):
            target.extend(value)
        elif field.message_type is not None:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def status_of(
    channel: grpc.Channel, method: MethodDescriptor, request: Any, metadata: Any
) -> grpc.StatusCode:
    """Call `method` with `request` (a message, or a list of them for a client stream)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    parse = GetMessageClass(method.output_type).FromString
    serialize = GetMessageClass(method.input_type).SerializeToString
    try:
        if method.client_streaming:
            channel.stream_unary(path, serialize, parse)(
                iter(request), metadata=metadata, timeout=CALL_TIMEOUT_S
            )
        elif method.server_streaming:
            for _ in channel.unary_stream(path, serialize, parse)(
                request, metadata=metadata, timeout=STREAM_TIMEOUT_S
            ):
                pass
        else:
            channel.unary_unary(path, serialize, parse)(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def fuzz(
    channel: grpc.Channel,
    method: MethodDescriptor,
    hints: Hints,
    metadata: Any,
    readable: Callable[[], None],
) -> Callable[[], None]:
    """After every call that succeeded, `readable` checks that what it changed still reads back."""
    requests: st.SearchStrategy[Any] = messages(method.input_type, hints)
    if method.client_streaming:
        requests = st.lists(requests, max_size=4)

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(request=requests)
    def run(request: Any) -> None:
        code = status_of(channel, method, request, metadata)
        assert code not in CRASHES, f"{method.full_name} answered {code.name} to {request!r:.2000}"
        if code == grpc.StatusCode.OK:
            readable()

    return run


ENGINE_API = engine_pb2.DESCRIPTOR.services_by_name["TranslationEngineApi"]
PLATFORM_API = platform_pb2.DESCRIPTOR.services_by_name["TranslationPlatformApi"]
WA_ENGINE_API = wa_engine_pb2.DESCRIPTOR.services_by_name["WordAlignmentEngineApi"]
WA_PLATFORM_API = wa_platform_pb2.DESCRIPTOR.services_by_name["WordAlignmentPlatformApi"]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    home = tmp_path_factory.mktemp("fuzz-grpc")
    with fresh_database(home) as url:
        api_settings = ApiSettings(
            host="127.0.0.1", grpc_port=0, rest_port=0, max_segment_chars=200, request_timeout_s=2
        )
        running = RunningApi(Settings(home=home, database_url=url, api=api_settings))
        try:
            yield running
        finally:
            running.close()


@pytest.fixture(scope="module")
def client(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


@pytest.fixture(scope="module")
def sentinel(client: httpx.Client) -> str:
    """An echo engine no fuzzed request names: it answers the health check after each method."""
    engine_id: str = create_engine(client, "echo")["id"]
    build = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert build.status_code == 201 and wait_for_build(client, build.json())["state"] == "Completed"
    return engine_id


def still_serving(api: RunningApi, client: httpx.Client, sentinel: str) -> None:
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    request = engine_pb2.TranslateRequest(engine_type="Echo", engine_id=sentinel, segment="still here")
    metadata = (("x-api-key", client.headers["X-API-Key"]),)
    assert (
        stub.Translate(request, metadata=metadata, timeout=CALL_TIMEOUT_S).results[0].translation
        == "still here"
    )
    health = health_pb2_grpc.HealthStub(api.channel).Check(
        health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S
    )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert client.get(f"/translation/engines/{sentinel}").status_code == 200


def reads_back(client: httpx.Client, *engine_ids: str) -> None:
    """The caller's engines and these engines' builds (a deleted engine's: 404) read back."""
    engines = client.get("/translation/engines")
    assert engines.status_code == 200, engines.text
    for engine_id in engine_ids:
        builds = client.get(f"/translation/engines/{engine_id}/builds")
        assert builds.status_code in (200, 404), builds.text


def file_location(client: httpx.Client) -> str:
    uploaded = client.post(
        "/files", files={"file": ("MAT.txt", b"In the beginning\n")}, data={"format": "Text"}
    )
    assert uploaded.status_code == 201, uploaded.text
    return f"files/{uploaded.json()['id']}"


@pytest.mark.parametrize("method", ENGINE_API.methods, ids=lambda m: m.name)
def test_engine_api_method(
    api: RunningApi, client: httpx.Client, sentinel: str, method: MethodDescriptor
) -> None:
    echo = create_engine(client, "echo")["id"]
    wait_for_build(client, client.post(f"/translation/engines/{echo}/builds", json={}).json())
    nmt = create_engine(client)["id"]
    location = file_location(client)
    hints: dict[str, st.SearchStrategy[Any]] = {
        "engine_id": st.sampled_from([echo, nmt]),
        "engine_type": st.sampled_from(["Echo", "Nmt", "echo", "SmtTransfer"]),
        "segment": st.sampled_from(["Hello world.", "a" * 200]),
        "source_segment": st.just("Hello"),
        "target_segment": st.just("Jambo"),
        "language": st.sampled_from(["en", "sw", "quc"]),
        "source_language": st.sampled_from(["en", "sw"]),
        "target_language": st.sampled_from(["en", "sw"]),
        "options": st.sampled_from(["{}", '{"maxSteps": 1}', "[", '{"unknown": 1}']),
        "location": st.sampled_from([location, f"{location}/contents"]),
        "n": st.integers(1, 3),
    }
    metadata = (("x-api-key", client.headers["X-API-Key"]),)
    fuzz(api.channel, method, hints, metadata, lambda: reads_back(client, echo, nmt))()
    reads_back(client, echo, nmt)
    still_serving(api, client, sentinel)


@pytest.mark.parametrize("method", PLATFORM_API.methods, ids=lambda m: m.name)
def test_platform_api_method(
    api: RunningApi, client: httpx.Client, sentinel: str, method: MethodDescriptor
) -> None:
    engine_id = create_engine(client)["id"]
    assert client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []}).status_code == 201
    spec = api.launcher.specs[-1]
    hints: dict[str, st.SearchStrategy[Any]] = {
        "engine_id": st.just(engine_id),
        "build_id": st.just(spec.build_id),
        "corpus_id": st.just("pc"),
        "text_id": st.just("MAT"),
    }
    metadata = (("authorization", f"Bearer {spec.job_token}"),)
    fuzz(api.channel, method, hints, metadata, lambda: reads_back(client, engine_id))()
    reads_back(client, engine_id)
    still_serving(api, client, sentinel)


def wa_engine(client: httpx.Client) -> str:
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
    created = client.post("/word-alignment/engines", json=body)
    assert created.status_code == 201, created.text
    engine_id: str = created.json()["id"]
    return engine_id


def wa_reads_back(client: httpx.Client, engine_id: str) -> None:
    assert client.get("/word-alignment/engines").status_code == 200
    builds = client.get(f"/word-alignment/engines/{engine_id}/builds")
    assert builds.status_code in (200, 404), builds.text


@pytest.mark.parametrize("method", WA_ENGINE_API.methods, ids=lambda m: m.name)
def test_word_alignment_engine_api_method(
    api: RunningApi, client: httpx.Client, sentinel: str, method: MethodDescriptor
) -> None:
    engine_id = wa_engine(client)
    nmt = create_engine(client)["id"]
    location = file_location(client)
    hints: dict[str, st.SearchStrategy[Any]] = {
        "engine_id": st.sampled_from([engine_id, nmt]),
        "engine_type": st.sampled_from(["Statistical", "statistical", "Nmt"]),
        "source_segment": st.sampled_from(["Hello", "a" * 200]),
        "target_segment": st.just("Jambo"),
        "source_language": st.sampled_from(["en", "sw"]),
        "target_language": st.sampled_from(["en", "sw"]),
        "options": st.sampled_from(["{}", "[", '{"unknown": 1}']),
        "location": st.sampled_from([location, f"{location}/contents"]),
    }
    metadata = (("x-api-key", client.headers["X-API-Key"]),)
    fuzz(api.channel, method, hints, metadata, lambda: wa_reads_back(client, engine_id))()
    wa_reads_back(client, engine_id)
    still_serving(api, client, sentinel)


@pytest.mark.parametrize("method", WA_PLATFORM_API.methods, ids=lambda m: m.name)
def test_word_alignment_platform_api_method(
    api: RunningApi, client: httpx.Client, sentinel: str, method: MethodDescriptor
) -> None:
    engine_id = wa_engine(client)
    started = client.post(f"/word-alignment/engines/{engine_id}/builds", json={"trainOn": []})
    assert started.status_code == 201, started.text
    spec = api.launcher.specs[-1]
    hints: dict[str, st.SearchStrategy[Any]] = {
        "engine_id": st.just(engine_id),
        "build_id": st.just(spec.build_id),
        "corpus_id": st.just("pc"),
        "text_id": st.just("MAT"),
    }
    metadata = (("authorization", f"Bearer {spec.job_token}"),)
    fuzz(api.channel, method, hints, metadata, lambda: wa_reads_back(client, engine_id))()
    wa_reads_back(client, engine_id)
    still_serving(api, client, sentinel)
