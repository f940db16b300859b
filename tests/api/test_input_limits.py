"""Every input limit answers a clear error over REST and over gRPC, and what was refused leaves
nothing behind. One API service with small limits serves the whole module."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.errors import MAX_MESSAGE_CHARS
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.helpers import fresh_database

pytestmark = [pytest.mark.database, pytest.mark.timeout(120)]

SEGMENT = 50
N_BEST = 3
UPLOAD = 2048
BODY = 4096
MESSAGE = 32 << 10
ITEMS = 3

Metadata = tuple[tuple[str, str], ...]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    home = tmp_path_factory.mktemp("limits")
    with fresh_database(home) as url:
        settings = Settings(
            home=home,
            database_url=url,
            api=ApiSettings(
                host="127.0.0.1",
                grpc_port=0,
                rest_port=0,
                max_segment_chars=SEGMENT,
                max_n_best=N_BEST,
                max_upload_bytes=UPLOAD,
                max_request_bytes=BODY,
                max_grpc_message_bytes=MESSAGE,
                max_list_items=ITEMS,
                max_queued_requests=0,
            ),
        )
        running = RunningApi(settings)
        try:
            yield running
        finally:
            running.close()


@pytest.fixture(scope="module")
def key(api: RunningApi) -> str:
    return api.api_key(scopes=ALL_SCOPES)


@pytest.fixture
def client(api: RunningApi, key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key}, timeout=60) as c:
        yield c


@pytest.fixture
def engines(api: RunningApi) -> engine_pb2_grpc.TranslationEngineApiStub:
    return engine_pb2_grpc.TranslationEngineApiStub(api.channel)


@pytest.fixture
def metadata(key: str) -> Metadata:
    return (("x-api-key", key),)


def refusal(call: Callable[..., Any], request: Any, metadata: Metadata) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as error:
        call(request, metadata=metadata, timeout=10)
    return error.value.code(), error.value.details()


def message(response: httpx.Response) -> str:
    text: str = response.json()["message"]
    return text


def echo_engine(client: httpx.Client) -> str:
    engine_id: str = create_engine(client, "echo")["id"]
    build = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert build.status_code == 201 and wait_for_build(client, build.json())["state"] == "Completed"
    return engine_id


def running_build(api: RunningApi, client: httpx.Client) -> tuple[str, str, Metadata]:
    """An nmt engine with a Pending build: (engine id, build id, the job's metadata)."""
    engine_id: str = create_engine(client)["id"]
    response = client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []})
    assert response.status_code == 201, response.text
    spec = api.launcher.specs[-1]
    return engine_id, spec.build_id, (("authorization", f"Bearer {spec.job_token}"),)


def upload(client: httpx.Client, contents: bytes, name: str = "a.txt") -> httpx.Response:
    return client.post("/files", files={"file": (name, contents)}, data={"format": "Text"})


def test_segment_length(
    client: httpx.Client, engines: engine_pb2_grpc.TranslationEngineApiStub, metadata: Metadata
) -> None:
    engine_id = echo_engine(client)
    url = f"/translation/engines/{engine_id}"
    fits, too_long = "a" * SEGMENT, "a" * (SEGMENT + 1)
    rest = {
        "translate": lambda s: client.post(f"{url}/translate", json=s),
        "translate-n": lambda s: client.post(f"{url}/translate/2", json=s),
        "word graph": lambda s: client.post(f"{url}/get-word-graph", json=s),
        "prefix segment": lambda s: client.post(f"{url}/translate-prefix", json={"segment": s, "prefix": ""}),
        "prefix": lambda s: client.post(f"{url}/translate-prefix", json={"segment": "a", "prefix": s}),
        "train source": lambda s: client.post(
            f"{url}/train-segment", json={"sourceSegment": s, "targetSegment": "b", "sentenceStart": True}
        ),
        "train target": lambda s: client.post(
            f"{url}/train-segment", json={"sourceSegment": "b", "targetSegment": s, "sentenceStart": True}
        ),
    }
    for name, call in rest.items():
        assert call(fits).status_code == 200, name
        refused = call(too_long)
        assert refused.status_code == 413, name
        assert f"{SEGMENT + 1} characters; the limit is {SEGMENT}" in message(refused), name
        assert call("a\x00b").status_code == 400, name
    assert client.post(f"{url}/translate", json="  ").status_code == 400

    grpc_calls: dict[str, tuple[Callable[..., Any], Callable[[str], Any]]] = {
        "Translate": (
            engines.Translate,
            lambda s: engine_pb2.TranslateRequest(engine_type="Echo", engine_id=engine_id, segment=s),
        ),
        "GetWordGraph": (
            engines.GetWordGraph,
            lambda s: engine_pb2.GetWordGraphRequest(engine_type="Echo", engine_id=engine_id, segment=s),
        ),
        "TranslatePrefix segment": (
            engines.TranslatePrefix,
            lambda s: engine_pb2.TranslatePrefixRequest(engine_type="Echo", engine_id=engine_id, segment=s),
        ),
        "TranslatePrefix prefix": (
            engines.TranslatePrefix,
            lambda s: engine_pb2.TranslatePrefixRequest(
                engine_type="Echo", engine_id=engine_id, segment="a", prefix=s
            ),
        ),
        "TrainSegmentPair source": (
            engines.TrainSegmentPair,
            lambda s: engine_pb2.TrainSegmentPairRequest(
                engine_type="Echo", engine_id=engine_id, source_segment=s, target_segment="b"
            ),
        ),
        "TrainSegmentPair target": (
            engines.TrainSegmentPair,
            lambda s: engine_pb2.TrainSegmentPairRequest(
                engine_type="Echo", engine_id=engine_id, source_segment="b", target_segment=s
            ),
        ),
    }
    for name, (rpc, request) in grpc_calls.items():
        rpc(request(fits), metadata=metadata, timeout=10)
        code, details = refusal(rpc, request(too_long), metadata)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, name
        assert f"the limit is {SEGMENT}" in details, name


def test_n_best(
    client: httpx.Client, engines: engine_pb2_grpc.TranslationEngineApiStub, metadata: Metadata
) -> None:
    engine_id = echo_engine(client)
    url = f"/translation/engines/{engine_id}"
    assert len(client.post(f"{url}/translate/{N_BEST}", json="hi").json()) == N_BEST
    for n in (0, -1, N_BEST + 1, 10**30):
        refused = client.post(f"{url}/translate/{n}", json="hi")
        assert refused.status_code == 400, n
    assert f"between 1 and {N_BEST}" in message(client.post(f"{url}/translate/{N_BEST + 1}", json="hi"))
    prefix = client.post(f"{url}/translate-prefix", json={"segment": "a", "prefix": "", "n": N_BEST + 1})
    assert prefix.status_code == 400

    request = engine_pb2.TranslateRequest(engine_type="Echo", engine_id=engine_id, segment="hi", n=N_BEST)
    assert len(engines.Translate(request, metadata=metadata, timeout=10).results) == N_BEST
    for n in (-1, N_BEST + 1, 2**31 - 1):
        request.n = n
        assert refusal(engines.Translate, request, metadata)[0] == grpc.StatusCode.INVALID_ARGUMENT
    prefix_request = engine_pb2.TranslatePrefixRequest(engine_id=engine_id, segment="a", n=N_BEST + 1)
    assert refusal(engines.TranslatePrefix, prefix_request, metadata)[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_upload_size(client: httpx.Client) -> None:
    """Files travel over REST only; over gRPC every message is bounded (test_message_size). An
    upload over the limit answers 400, as Serval's (docs/api.md, Limits)."""
    created = upload(client, b"a" * UPLOAD)
    assert created.status_code == 201, created.text
    count = len(client.get("/files").json())
    refused = upload(client, b"a" * (UPLOAD + 1))
    assert refused.status_code == 400
    assert f"limit of {UPLOAD} bytes" in message(refused)
    assert len(client.get("/files").json()) == count
    file_id = created.json()["id"]
    replaced = client.patch(f"/files/{file_id}", files={"file": ("a.txt", b"b" * (UPLOAD + 1))})
    assert replaced.status_code == 400
    assert client.get(f"/files/{file_id}/contents").content == b"a" * UPLOAD


def test_request_body_size(client: httpx.Client) -> None:
    engine_id = echo_engine(client)
    url = f"/translation/engines/{engine_id}/translate"
    declared = client.post(url, json="a" * BODY)
    assert declared.status_code == 413
    assert f"limit of {BODY} bytes" in message(declared)

    def chunks() -> Iterator[bytes]:
        yield b'"'
        for _ in range(BODY // 256 + 1):
            yield b"a" * 256
        yield b'"'

    streamed = client.post(url, content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413
    assert client.post(url, json="fits").status_code == 200
    nested = client.post(url, content=b"[" * (BODY - 1), headers={"Content-Type": "application/json"})
    assert nested.status_code == 400
    assert "message" in nested.json()


def test_message_size(client: httpx.Client, api: RunningApi, metadata: Metadata) -> None:
    engine_id = echo_engine(client)
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    request = engine_pb2.TranslateRequest(engine_id=engine_id, segment="a" * (MESSAGE + 1))
    code, details = refusal(stub.Translate, request, metadata)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in details
    platform = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    big = platform_pb2.BuildFaultedRequest(build_id="b", message="a" * (MESSAGE + 1))
    assert refusal(platform.BuildFaulted, big, ())[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    request.segment = "fits"
    assert stub.Translate(request, metadata=metadata, timeout=10).results[0].translation == "fits"


def test_list_sizes(
    client: httpx.Client, engines: engine_pb2_grpc.TranslationEngineApiStub, metadata: Metadata
) -> None:
    file_id = upload(client, b"hello\n").json()["id"]
    too_many_files = [{"fileId": file_id, "textId": f"T{i}"} for i in range(ITEMS + 1)]
    refused = client.post("/corpora", json={"language": "en", "files": too_many_files})
    assert refused.status_code == 400
    assert message(refused) == f"files: {ITEMS + 1} items; the limit is {ITEMS}"
    corpus_id = client.post("/corpora", json={"language": "en", "files": too_many_files[:ITEMS]}).json()["id"]
    assert client.patch(f"/corpora/{corpus_id}", json={"files": too_many_files}).status_code == 400

    engine_id = create_engine(client)["id"]
    pcs = f"/translation/engines/{engine_id}/parallel-corpora"
    ids = [corpus_id] * (ITEMS + 1)
    refused = client.post(pcs, json={"sourceCorpusIds": ids, "targetCorpusIds": [corpus_id]})
    assert refused.status_code == 400
    assert "sourceCorpusIds" in message(refused)
    pc_id = client.post(pcs, json={"sourceCorpusIds": [corpus_id], "targetCorpusIds": [corpus_id]}).json()[
        "id"
    ]
    builds = f"/translation/engines/{engine_id}/builds"
    for body in (
        {"trainOn": [{"parallelCorpusId": pc_id}] * (ITEMS + 1)},
        {"pretranslate": [{"parallelCorpusId": pc_id}] * (ITEMS + 1)},
        {"trainOn": [{"parallelCorpusId": pc_id, "sourceFilters": [{"corpusId": corpus_id}] * (ITEMS + 1)}]},
        {
            "trainOn": [
                {
                    "parallelCorpusId": pc_id,
                    "sourceFilters": [{"corpusId": corpus_id, "textIds": ["T0"] * (ITEMS + 1)}],
                }
            ]
        },
    ):
        refused = client.post(builds, json=body)
        assert refused.status_code == 400, body
        assert f"the limit is {ITEMS}" in message(refused), body
    assert client.get(builds).json() == []

    def corpus(**fields: Any) -> engine_pb2.MonolingualCorpus:
        return engine_pb2.MonolingualCorpus(id="c", language="en", train_on_all=True, **fields)

    location = engine_pb2.CorpusFile(location=f"files/{file_id}", text_id="T")
    for corpora in (
        [engine_pb2.ParallelCorpus(id="pc")] * (ITEMS + 1),
        [engine_pb2.ParallelCorpus(id="pc", source_corpora=[corpus()] * (ITEMS + 1))],
        [engine_pb2.ParallelCorpus(id="pc", source_corpora=[corpus(files=[location] * (ITEMS + 1))])],
        [engine_pb2.ParallelCorpus(id="pc", source_corpora=[corpus(train_on_text_ids=["T"] * (ITEMS + 1))])],
    ):
        request = engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=engine_id, corpora=corpora)
        code, details = refusal(engines.StartBuild, request, metadata)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert f"the limit is {ITEMS}" in details
    assert client.get(builds).json() == []


def test_engine_corpus_lists(client: httpx.Client) -> None:
    file_id = upload(client, b"hello\n").json()["id"]
    engine_id = create_engine(client)["id"]
    corpora = f"/translation/engines/{engine_id}/corpora"
    files = [{"fileId": file_id, "textId": f"T{i}"} for i in range(ITEMS + 1)]
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "sourceFiles": files[:1], "targetFiles": files}
    refused = client.post(corpora, json=body)
    assert refused.status_code == 400
    assert message(refused) == f"targetFiles: {ITEMS + 1} items; the limit is {ITEMS}"
    corpus_id = client.post(corpora, json={**body, "targetFiles": files[:1]}).json()["id"]
    assert client.patch(f"{corpora}/{corpus_id}", json={"sourceFiles": files}).status_code == 400
    long_text_id = client.post(
        corpora, json={**body, "targetFiles": [{"fileId": file_id, "textId": "T" * 201}]}
    )
    assert long_text_id.status_code == 400 and "targetFiles[0].textId" in message(long_text_id)

    builds = f"/translation/engines/{engine_id}/builds"
    for body, where in (
        ({"trainOn": [{"corpusId": corpus_id, "textIds": ["T0"] * (ITEMS + 1)}]}, "trainOn[0].textIds"),
        ({"pretranslate": [{"corpusId": corpus_id, "textIds": ["T" * 201]}]}, "pretranslate[0].textIds[0]"),
        ({"trainOn": [{"corpusId": corpus_id, "scriptureRange": "MAT;" * 300}]}, "trainOn[0].scriptureRange"),
        ({"trainOn": [{"corpusId": "c" * 100}]}, "trainOn[0].corpusId"),
    ):
        refused = client.post(builds, json=body)
        assert refused.status_code == 400, body
        assert message(refused).startswith(where), message(refused)
    assert client.get(builds).json() == []


def test_names_ids_and_tags(
    client: httpx.Client, engines: engine_pb2_grpc.TranslationEngineApiStub, metadata: Metadata
) -> None:
    config = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "echo"}
    assert client.post("/translation/engines", json={**config, "name": "n" * 201}).status_code == 400
    assert client.post("/translation/engines", json={**config, "name": "n\x00"}).status_code == 400
    assert client.post("/translation/engines", json={**config, "sourceLanguage": "e" * 65}).status_code == 400
    assert client.post("/corpora", json={"language": "en", "name": "n" * 201}).status_code == 400
    assert upload(client, b"x", name="n" * 501).status_code == 400
    file_id = upload(client, b"x", name="n" * 300 + ".txt").json()["id"]
    refused = client.post("/corpora", json={"language": "en", "files": [{"fileId": file_id}]})
    assert refused.status_code == 400
    assert "files[0].textId" in message(refused)
    for engine_id in ("%00", "x" * 65, "a%00b"):
        assert client.get(f"/translation/engines/{engine_id}").status_code == 404
        assert client.post(f"/translation/engines/{engine_id}/translate", json="hi").status_code == 404
    assert client.get("/files/%00").status_code == 404
    assert client.get("/corpora/%00").status_code == 404

    def create(
        engine_id: str, engine_name: str | None = None, source_language: str = "en"
    ) -> engine_pb2.CreateRequest:
        return engine_pb2.CreateRequest(
            engine_type="Echo",
            engine_id=engine_id,
            engine_name=engine_name,
            source_language=source_language,
            target_language="sw",
        )

    for engine_id in ("../x", ".", "a/b", "x" * 65, "a\x00", "é"):
        code, details = refusal(engines.Create, create(engine_id), metadata)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, engine_id
        assert "not a valid id" in details
    assert refusal(engines.Create, create("ok1", engine_name="n" * 201), metadata)[0] == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert refusal(engines.Create, create("ok1", source_language="e" * 65), metadata)[0] == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    engines.Create(create("ok-1.x_y"), metadata=metadata, timeout=10)
    for build_id in ("../b", "b" * 65):
        request = engine_pb2.StartBuildRequest(engine_type="Echo", engine_id="ok-1.x_y", build_id=build_id)
        assert refusal(engines.StartBuild, request, metadata)[0] == grpc.StatusCode.INVALID_ARGUMENT
    for engine_id in ("\x00", "x" * 10_000):
        request = engine_pb2.TranslateRequest(engine_id=engine_id, segment="hi")
        code, details = refusal(engines.Translate, request, metadata)
        assert code == grpc.StatusCode.NOT_FOUND
        assert len(details) < 200


def test_error_messages_stay_short(
    client: httpx.Client, engines: engine_pb2_grpc.TranslationEngineApiStub, metadata: Metadata
) -> None:
    """An error message that quotes the input is cut, so it fits gRPC's trailing metadata."""
    for value in ("t" * 20_000, "ŧ" * 8_000):
        code, details = refusal(
            engines.GetQueueSize, engine_pb2.GetQueueSizeRequest(engine_type=value), metadata
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert len(details) <= MAX_MESSAGE_CHARS
        request = engine_pb2.GetLanguageInfoRequest(engine_type="Echo", language=value)
        assert refusal(engines.GetLanguageInfo, request, metadata)[0] == grpc.StatusCode.INVALID_ARGUMENT
    response = client.get(f"/translation/engine-types/{'t' * 8000}/queues")
    assert response.status_code == 400
    assert len(message(response)) <= MAX_MESSAGE_CHARS


def test_build_options_nested_too_deeply(
    client: httpx.Client, engines: engine_pb2_grpc.TranslationEngineApiStub, metadata: Metadata
) -> None:
    engine_id = create_engine(client)["id"]
    request = engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=engine_id, options="[" * 20_000)
    code, details = refusal(engines.StartBuild, request, metadata)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "nested too deeply" in details
    body = b'{"options": {"a": ' + b"[" * 2000 + b"]" * 2000 + b"}}"
    refused = client.post(
        f"/translation/engines/{engine_id}/builds", content=body, headers={"Content-Type": "application/json"}
    )
    assert refused.status_code == 400
    assert client.post(
        f"/translation/engines/{engine_id}/builds", json={"pretranslate": [{"parallelCorpusId": [1]}]}
    ).status_code == (400)
    filters = [{"parallelCorpusId": "x", "sourceFilters": [{"corpusId": {"a": 1}, "textIds": 7}]}]
    assert (
        client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": filters}).status_code == 400
    )
    assert client.get(f"/translation/engines/{engine_id}/builds").json() == []


def test_undecodable_request(api: RunningApi, metadata: Metadata) -> None:
    """Bytes that are no message of the method's type: a truncated tag, a string that is no UTF-8."""
    for method, garbage in (
        ("/serval.translation.v1.TranslationEngineApi/Translate", b"\xff\xff\xff"),
        ("/serval.translation.v1.TranslationEngineApi/Translate", b"\x1a\x02\xff\xfe"),
        ("/serval.translation.v1.TranslationEngineApi/WatchBuild", b"\x12\x02\xff\xfe"),
        ("/serval.health.v1.HealthApi/HealthCheck", b"\xff\xff\xff"),
    ):
        raw = api.channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
        code, details = refusal(raw, garbage, metadata)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, method
        assert "not a valid protobuf message" in details
    stream = api.channel.stream_unary(
        "/serval.translation.v1.TranslationPlatformApi/InsertPretranslations",
        request_serializer=bytes,
        response_deserializer=bytes,
    )
    with pytest.raises(grpc.RpcError) as error:
        stream(iter([b"\xff\xff\xff"]), metadata=(("authorization", "Bearer x"),), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_job_reports(api: RunningApi, client: httpx.Client) -> None:
    """A job's report that does not fit is refused and changes nothing; free text is cut to fit."""
    engine_id, build_id, job = running_build(api, client)
    platform = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    url = f"/translation/engines/{engine_id}/builds/{build_id}"
    before = client.get(url).json()
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    far_future = platform_pb2.Phase(stage=platform_pb2.PHASE_STAGE_TRAIN)
    far_future.started.seconds = 2**62
    for call, request in (
        (
            platform.UpdateBuildStatus,
            platform_pb2.UpdateBuildStatusRequest(build_id=build_id, progress=math.nan),
        ),
        (
            platform.UpdateBuildStatus,
            platform_pb2.UpdateBuildStatusRequest(build_id=build_id, phases=[far_future]),
        ),
        (
            platform.UpdateBuildStatus,
            platform_pb2.UpdateBuildStatusRequest(
                build_id=build_id, phases=[platform_pb2.Phase()] * (ITEMS + 1)
            ),
        ),
        (platform.BuildCompleted, platform_pb2.BuildCompletedRequest(build_id=build_id, confidence=math.inf)),
        (platform.BuildCompleted, platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=-1)),
        (
            platform.IncrementEngineCorpusSize,
            platform_pb2.IncrementEngineCorpusSizeRequest(engine_id=engine_id, count=-5),
        ),
        (
            platform.UpdateBuildExecutionData,
            platform_pb2.UpdateBuildExecutionDataRequest(
                engine_id=engine_id,
                build_id=build_id,
                execution_data=platform_pb2.ExecutionData(warnings=["w"] * (ITEMS + 1)),
            ),
        ),
    ):
        assert refusal(call, request, job)[0] == invalid, request
    after = client.get(url).json()
    assert after["revision"] == before["revision"] and after["state"] == "Pending"

    assert refusal(platform.BuildStarted, platform_pb2.BuildStartedRequest(build_id="\x00"), job)[0] == (
        grpc.StatusCode.NOT_FOUND
    )
    status = platform_pb2.UpdateBuildStatusRequest(build_id=build_id, message="m\x00" + "a" * 3000)
    platform.UpdateBuildStatus(status, metadata=job, timeout=10)
    stored = client.get(url).json()["message"]
    assert stored.startswith("ma") and "\x00" not in stored and len(stored) == 2000

    def row(**fields: Any) -> platform_pb2.InsertPretranslationsRequest:
        values = {"engine_id": engine_id, "corpus_id": "pc", "text_id": "MAT", "translation": "x", **fields}
        return platform_pb2.InsertPretranslationsRequest(**values)

    for rows in ([row(translation="a\x00")], [row(text_id="M\x00")], [row(source_refs=["r"] * (ITEMS + 1))]):
        with pytest.raises(grpc.RpcError) as error:
            platform.InsertPretranslations(iter(rows), metadata=job, timeout=10)
        assert error.value.code() == invalid
    with pytest.raises(grpc.RpcError) as error:
        platform.InsertPretranslations(iter([row(engine_id="\x00")]), metadata=job, timeout=10)
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED

    platform.BuildFaulted(
        platform_pb2.BuildFaultedRequest(build_id=build_id, message="\x00" * 5 + "f" * 5000), metadata=job
    )
    faulted = client.get(url).json()
    assert faulted["state"] == "Faulted" and faulted["message"] == "f" * 1999 + "…"


def test_queued_requests(
    api: RunningApi,
    client: httpx.Client,
    engines: engine_pb2_grpc.TranslationEngineApiStub,
    metadata: Metadata,
) -> None:
    """`max_queued_requests` is 0 here: every nmt request finds the queue full."""
    engine_id, build_id, job = running_build(api, client)
    platform = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    platform.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build_id), metadata=job)
    platform.BuildCompleted(platform_pb2.BuildCompletedRequest(build_id=build_id), metadata=job)
    refused = client.post(f"/translation/engines/{engine_id}/translate", json="hi")
    assert refused.status_code == 503
    assert "too many requests" in message(refused)
    assert refused.headers["Retry-After"] == "1"
    request = engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine_id, segment="hi")
    code, details = refusal(engines.Translate, request, metadata)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "too many requests" in details
