"""Every client endpoint × {no credentials, missing scope, another owner, the owner}.

The tables below must name every REST route of the FastAPI app and every RPC the gRPC server
offers (read through reflection): a new endpoint fails `test_every_*_is_in_the_table` until it
gets a row here (or is listed as public / separately authenticated, with the reason).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pool, empty_pb2, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from starlette.routing import BaseRoute, Mount

from serval.admin.v1 import admin_pb2
from serval.translation.v1 import engine_pb2
from serval.word_alignment.v1 import engine_pb2 as wa_engine_pb2
from serval_api.auth import (
    ADMIN,
    ALL_SCOPES,
    API_KEY_SCOPES,
    CREATE_API_KEYS,
    CREATE_ENGINES,
    CREATE_HOOKS,
    CREATE_WORD_ALIGNMENT_ENGINES,
    DELETE_API_KEYS,
    DELETE_ENGINES,
    DELETE_HOOKS,
    DELETE_WORD_ALIGNMENT_ENGINES,
    READ_API_KEYS,
    READ_ENGINES,
    READ_HOOKS,
    READ_STATUS,
    READ_WORD_ALIGNMENT_ENGINES,
    UPDATE_ENGINES,
    UPDATE_WORD_ALIGNMENT_ENGINES,
)
from serval_api.metrics import ApiMetrics
from serval_api.rest.app import create_app
from serval_api.rest.libretranslate_protocol import PATHS as LIBRETRANSLATE_PATHS
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi
from tests.api.endpoints import NEW_HOOK, OTHER_OWNER, OWNER, SIL_CONVERTERS_ENDPOINTS, Grpc, Rest, World
from tests.helpers import fresh_database

Code: TypeAlias = grpc.StatusCode
ENGINES = "/api/v1/translation/engines"
ENGINE = ENGINES + "/{engine_id}"
ADMIN_PATH = "/api/v1/admin"
BUILDS_FEED = "/api/v1/translation/builds"
NEW_ENGINE = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
NOT_BUILT = (409,)
WA_ENGINES = "/api/v1/word-alignment/engines"
WA_ENGINE = WA_ENGINES + "/{engine_id}"
WA_IDS = {
    "engine_id": "wa_engine_id",
    "build_id": "wa_build_id",
    "pc_id": "wa_pc_id",
    "corpus_id": "wa_pc_id",
    "engine_type": "wa_engine_type",
}
"""The word-alignment routes' path parameters, filled with the world's word-alignment engine's."""
NEW_WA_ENGINE = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
WA_READ = (READ_WORD_ALIGNMENT_ENGINES, READ_ENGINES)
WA_CREATE = (CREATE_WORD_ALIGNMENT_ENGINES, CREATE_ENGINES)
WA_UPDATE = (UPDATE_WORD_ALIGNMENT_ENGINES, UPDATE_ENGINES)
WA_DELETE = (DELETE_WORD_ALIGNMENT_ENGINES, DELETE_ENGINES)
"""The word-alignment routes answer to Serval's word-alignment scopes and, as before, to the
translation-engine scopes."""


def _wa_parallel_corpus_body(w: World) -> dict[str, list[str]]:
    return {"sourceCorpusIds": [w.corpus_id], "targetCorpusIds": [w.corpus("sw")]}


REST_ENDPOINTS: list[Rest] = [
    Rest("GET", ENGINES, READ_ENGINES, 200),
    Rest("POST", ENGINES, CREATE_ENGINES, 201, json=NEW_ENGINE),
    Rest("GET", ENGINE, READ_ENGINES, 200),
    Rest("PATCH", ENGINE, UPDATE_ENGINES, 200, json={"targetLanguage": "fr"}),
    Rest("DELETE", ENGINE, DELETE_ENGINES, 200),
    Rest("GET", ENGINE + "/builds", READ_ENGINES, 200),
    Rest("POST", ENGINE + "/builds", UPDATE_ENGINES, 201, json={}),
    Rest("GET", ENGINE + "/builds/{build_id}", READ_ENGINES, 200),
    Rest("GET", ENGINE + "/current-build", READ_ENGINES, (200, 204)),
    Rest("POST", ENGINE + "/current-build/cancel", UPDATE_ENGINES, (200, 204)),
    Rest("POST", ENGINE + "/translate", READ_ENGINES, NOT_BUILT, json="hello"),
    Rest("POST", ENGINE + "/translate/{n}", READ_ENGINES, NOT_BUILT, json="hello"),
    Rest("POST", ENGINE + "/get-word-graph", READ_ENGINES, NOT_BUILT, json="hello"),
    Rest(
        "POST",
        ENGINE + "/translate-prefix",
        READ_ENGINES,
        NOT_BUILT,
        json={"segment": "hello", "prefix": "a"},
    ),
    Rest(
        "POST",
        ENGINE + "/train-segment",
        UPDATE_ENGINES,
        NOT_BUILT,
        json={"sourceSegment": "a", "targetSegment": "b", "sentenceStart": True},
    ),
    Rest("GET", ENGINE + "/model-download-url", READ_ENGINES, 404),
    Rest("GET", ENGINE + "/corpora", READ_ENGINES, 200),
    Rest(
        "POST",
        ENGINE + "/corpora",
        UPDATE_ENGINES,
        201,
        json=lambda w: {
            "sourceLanguage": "en",
            "targetLanguage": "sw",
            "sourceFiles": [{"fileId": w.file_id}],
            "targetFiles": [],
        },
    ),
    Rest("GET", ENGINE + "/corpora/{engine_corpus_id}", READ_ENGINES, 200),
    Rest("PATCH", ENGINE + "/corpora/{engine_corpus_id}", UPDATE_ENGINES, 200, json={"targetFiles": []}),
    Rest(
        "DELETE", ENGINE + "/corpora/{engine_corpus_id}", UPDATE_ENGINES, 200, query={"delete-files": "false"}
    ),
    Rest("GET", ENGINE + "/parallel-corpora/{parallel_corpus_id}/pretranslations", READ_ENGINES, NOT_BUILT),
    # Serval's older path names a corpus; the world's corpus is not a parallel corpus, so even its owner gets 404.
    Rest("GET", ENGINE + "/corpora/{corpus_id}/pretranslations", READ_ENGINES, 404),
    Rest(
        "GET",
        ENGINE + "/parallel-corpora/{parallel_corpus_id}/pretranslations/{text_id}/usfm",
        READ_ENGINES,
        NOT_BUILT,
    ),
    Rest(
        "GET",
        ENGINE + "/parallel-corpora/{parallel_corpus_id}/pretranslations/{text_id}",
        READ_ENGINES,
        NOT_BUILT,
    ),
    Rest("GET", ENGINE + "/parallel-corpora/{parallel_corpus_id}/confidences", READ_ENGINES, NOT_BUILT),
    Rest("GET", ENGINE + "/corpora/{corpus_id}/pretranslations/{text_id}", READ_ENGINES, 404),
    Rest("GET", ENGINE + "/corpora/{corpus_id}/pretranslations/{text_id}/usfm", READ_ENGINES, 404),
    Rest("GET", "/api/v1/status/health", READ_STATUS, (200, 503)),
    Rest("GET", BUILDS_FEED, READ_ENGINES, 200, query={"created-after": "2000-01-01 00:00:00Z"}),
    # The owner's builds made by other rows may have finished, or none has: 408 after the poll window.
    Rest(
        "GET",
        BUILDS_FEED + "/next-finished",
        READ_ENGINES,
        (200, 408),
        query={"finished-after": "2000-01-01 00:00:00Z"},
    ),
    Rest("GET", "/api/v1/translation/engine-types/{engine_type}/queues", READ_ENGINES, 200),
    Rest("GET", "/api/v1/translation/engine-types/{engine_type}/languages/{language}", READ_ENGINES, 200),
    Rest("POST", ADMIN_PATH + "/api-keys", ADMIN, 201, json={"owner": "x", "scopes": [READ_ENGINES]}),
    Rest("GET", ADMIN_PATH + "/api-keys", ADMIN, 200),
    Rest("PUT", ADMIN_PATH + "/api-keys/{key_id}/limits", ADMIN, 200, json={"translatePerMinute": 100}),
    Rest("DELETE", ADMIN_PATH + "/api-keys/{key_id}", ADMIN, 200),
    Rest("POST", ADMIN_PATH + "/node-tokens", ADMIN, 201, json={"name": "pool"}),
    Rest("GET", ADMIN_PATH + "/node-tokens", ADMIN, 200),
    Rest("DELETE", ADMIN_PATH + "/node-tokens/{token_id}", ADMIN, 200),
    Rest("GET", ADMIN_PATH + "/nodes", ADMIN, 200),
    Rest("GET", ADMIN_PATH + "/nodes/{node_id}", ADMIN, 200),
    Rest("POST", ADMIN_PATH + "/nodes/{node_id}/drain", ADMIN, 200, json={"reason": "x"}),
    Rest("POST", ADMIN_PATH + "/nodes/{node_id}/undrain", ADMIN, 200),
    # The node is recorded but not connected, and the engine has no revision yet.
    Rest(
        "POST", ADMIN_PATH + "/nodes/{node_id}/models", ADMIN, 409, json=lambda w: {"engineId": w.engine_id}
    ),
    Rest("DELETE", ADMIN_PATH + "/nodes/{node_id}/models/{engine_id}", ADMIN, 404),
    Rest("GET", ADMIN_PATH + "/builds", ADMIN, 200),
    Rest("GET", ADMIN_PATH + "/summary", ADMIN, 200),
    Rest("GET", ADMIN_PATH + "/overview", ADMIN, 200),
    Rest("GET", ADMIN_PATH + "/engines", ADMIN, 200),
    Rest("GET", ADMIN_PATH + "/base-models", ADMIN, 200),
    # Serval 1.20's key management: an administrator's scopes, which no ordinary key holds.
    Rest(
        "POST",
        "/api/v1/api-keys",
        CREATE_API_KEYS,
        201,
        json={"clientId": "x", "name": "n", "scopes": [READ_ENGINES]},
    ),
    Rest("GET", "/api/v1/api-keys", READ_API_KEYS, 200, query={"clientId": "someone"}),
    Rest("GET", "/api/v1/api-keys/{key_id}", READ_API_KEYS, 200),
    Rest("DELETE", "/api/v1/api-keys/{key_id}", DELETE_API_KEYS, 200),
    Rest("GET", "/api/v1/hooks", READ_HOOKS, 200),
    Rest("POST", "/api/v1/hooks", CREATE_HOOKS, 201, json=NEW_HOOK),
    Rest("GET", "/api/v1/hooks/{hook_id}", READ_HOOKS, 200),
    Rest("DELETE", "/api/v1/hooks/{hook_id}", DELETE_HOOKS, 200),
    Rest("GET", WA_ENGINES, WA_READ, 200, ids=WA_IDS),
    Rest("POST", WA_ENGINES, WA_CREATE, 201, json=NEW_WA_ENGINE, ids=WA_IDS),
    Rest("GET", WA_ENGINE, WA_READ, 200, ids=WA_IDS),
    Rest("DELETE", WA_ENGINE, WA_DELETE, 200, ids=WA_IDS),
    Rest(
        "POST",
        WA_ENGINE + "/align",
        WA_READ,
        NOT_BUILT,
        json={"sourceSegment": "a", "targetSegment": "b"},
        ids=WA_IDS,
    ),
    Rest("GET", WA_ENGINE + "/parallel-corpora", WA_READ, 200, ids=WA_IDS),
    Rest(
        "POST",
        WA_ENGINE + "/parallel-corpora",
        WA_UPDATE,
        201,
        json=_wa_parallel_corpus_body,
        ids=WA_IDS,
    ),
    Rest("GET", WA_ENGINE + "/parallel-corpora/{pc_id}", WA_READ, 200, ids=WA_IDS),
    Rest("PATCH", WA_ENGINE + "/parallel-corpora/{pc_id}", WA_UPDATE, 200, json={}, ids=WA_IDS),
    Rest("DELETE", WA_ENGINE + "/parallel-corpora/{pc_id}", WA_UPDATE, 200, ids=WA_IDS),
    Rest("GET", WA_ENGINE + "/corpora/{corpus_id}/word-alignments", WA_READ, NOT_BUILT, ids=WA_IDS),
    Rest("GET", WA_ENGINE + "/builds", WA_READ, 200, ids=WA_IDS),
    Rest("POST", WA_ENGINE + "/builds", WA_UPDATE, 201, json={}, ids=WA_IDS),
    Rest("GET", WA_ENGINE + "/builds/{build_id}", WA_READ, 200, ids=WA_IDS),
    Rest("GET", WA_ENGINE + "/current-build", WA_READ, (200, 204), ids=WA_IDS),
    Rest("POST", WA_ENGINE + "/current-build/cancel", WA_UPDATE, (200, 204), ids=WA_IDS),
    Rest("GET", "/api/v1/word-alignment/engine-types/{engine_type}/queues", WA_READ, 200, ids=WA_IDS),
]
REST_ENDPOINTS += SIL_CONVERTERS_ENDPOINTS


def _files_and_corpora_row(method: str, path: str, scope: str) -> Rest:
    """A `(method, path under /api/v1, scope)` row of test_rest_files_corpora, with its body."""
    full = "/api/v1" + path
    if path.startswith("/files") and method in ("POST", "PATCH"):
        upload = {"file": ("a.txt", b"a\n", "text/plain")}
        return Rest(method, full, scope, (200, 201), files=upload, data={"format": "Text"})
    if "parallel-corpora" in path and method in ("POST", "PATCH"):
        return Rest(method, full, scope, (200, 201), json=_parallel_corpus_body)
    if path.startswith("/corpora") and method in ("POST", "PATCH"):
        return Rest(method, full, scope, (200, 201), json={"language": "en", "files": []})
    return Rest(method, full, scope, (200, 201))


def _parallel_corpus_body(w: World) -> dict[str, list[str]]:
    return {"sourceCorpusIds": [w.corpus_id], "targetCorpusIds": [w.corpus_id]}


try:
    _files_and_corpora = importlib.import_module("tests.api.test_rest_files_corpora")
except ModuleNotFoundError as e:
    if e.name != "tests.api.test_rest_files_corpora":
        raise
else:
    REST_ENDPOINTS += [
        row if isinstance(row, Rest) else _files_and_corpora_row(*row)
        for row in _files_and_corpora.FILE_AND_CORPUS_ENDPOINTS
    ]

PUBLIC_REST = {
    ("GET", "/api/v1/status/ping"): "liveness probe",
    ("GET", "/api/v1/status/deployment-info"): "the service's version, public as in Serval",
    ("GET", "/openapi.json"): "API description",
    ("GET", "/docs"): "API description",
    ("GET", "/docs/oauth2-redirect"): "API description",
    ("*", "/docs-assets"): "the API reference's own scripts (Swagger UI, served instead of from a CDN)",
    ("GET", "/swagger/v1/swagger.json"): "API description, at Serval's path",
    ("GET", "/metrics"): "Prometheus scrape",
    ("GET", "/api/v1/model-downloads/{token}"): "presigned: the URL's signed token is the credential",
    ("GET", "/frontend/settings"): "LibreTranslate's settings (limits), public as in LibreTranslate",
    ("GET", "/health"): "LibreTranslate's liveness probe",
    ("POST", "/translate_file"): "LibreTranslate's file translation: 403 to everyone, it is off here",
    ("GET", "/"): "the playground page (docs/web-pages.md): no data, its calls carry the typed key",
    ("GET", "/admin"): "the console page: no data, its calls carry the typed key (403 without admin)",
    ("GET", "/web/{name}"): "the pages' scripts and style sheet",
    **{
        ("OPTIONS", path): "CORS preflight of a LibreTranslate route: no data"
        for path in LIBRETRANSLATE_PATHS
    },
}

LIBRETRANSLATE_REST: list[Rest] = [
    Rest("POST", "/translate", READ_ENGINES, 400, data={"q": "Hello", "source": "en", "target": "sw"}),
    Rest("POST", "/detect", READ_ENGINES, 400, data={"q": "Hello"}),
    Rest("GET", "/languages", READ_ENGINES, 400),
    Rest("POST", "/languages", READ_ENGINES, 400),
]
"""LibreTranslate's routes take the key as the `api_key` field and answer as LibreTranslate does:
no key 400, a wrong one 403 (`test_libretranslate_access`). No model is published here, so the
owner's request passes the key and fails later with 400 (tests/e2e/test_libretranslate.py
translates)."""
LIBRETRANSLATE_WITHOUT_KEY = {("GET", "/languages"): 200, ("POST", "/languages"): 200}
"""Routes that answer without a key (the public base model's languages, none here)."""


def _engine_request(message: type[Any], **fields: Any) -> Any:
    return lambda w: message(engine_type="Nmt", engine_id=w.engine_id, **fields)


def _cancel_request(w: World) -> engine_pb2.CancelBuildRequest:
    assert w.build_id
    return engine_pb2.CancelBuildRequest(engine_type="Nmt", engine_id=w.engine_id)


ENGINE_API = "/serval.translation.v1.TranslationEngineApi/"
WA_API = "/serval.word_alignment.v1.WordAlignmentEngineApi/"


def _wa_request(message: type[Any], **fields: Any) -> Any:
    return lambda w: message(engine_type="Statistical", engine_id=w.wa_engine_id, **fields)


def _wa_cancel_request(w: World) -> wa_engine_pb2.CancelBuildRequest:
    assert w.wa_build_id
    return wa_engine_pb2.CancelBuildRequest(engine_type="Statistical", engine_id=w.wa_engine_id)


ADMIN_API = "/serval.admin.v1.AdminApi/"
GRPC_ENDPOINTS: list[Grpc] = [
    Grpc(
        WA_API + "Create",
        WA_CREATE,
        lambda w: wa_engine_pb2.CreateRequest(
            engine_type="Statistical", source_language="en", target_language="sw"
        ),
        owned=False,
    ),
    Grpc(WA_API + "Delete", WA_DELETE, _wa_request(wa_engine_pb2.DeleteRequest)),
    Grpc(
        WA_API + "GetWordAlignment",
        WA_READ,
        _wa_request(wa_engine_pb2.GetWordAlignmentRequest, source_segment="a", target_segment="b"),
        ok=(Code.FAILED_PRECONDITION,),
    ),
    Grpc(WA_API + "StartBuild", WA_UPDATE, _wa_request(wa_engine_pb2.StartBuildRequest)),
    Grpc(WA_API + "CancelBuild", WA_UPDATE, _wa_cancel_request),
    Grpc(
        WA_API + "GetQueueSize",
        WA_READ,
        lambda w: wa_engine_pb2.GetQueueSizeRequest(engine_type="Statistical"),
        owned=False,
    ),
    Grpc(
        ENGINE_API + "Create",
        CREATE_ENGINES,
        lambda w: engine_pb2.CreateRequest(engine_type="Nmt", source_language="en", target_language="sw"),
        owned=False,
    ),
    Grpc(ENGINE_API + "Delete", DELETE_ENGINES, _engine_request(engine_pb2.DeleteRequest)),
    Grpc(
        ENGINE_API + "Update", UPDATE_ENGINES, _engine_request(engine_pb2.UpdateRequest, target_language="fr")
    ),
    Grpc(
        ENGINE_API + "Translate",
        READ_ENGINES,
        _engine_request(engine_pb2.TranslateRequest, segment="hi", n=1),
        ok=(Code.FAILED_PRECONDITION,),
    ),
    Grpc(
        ENGINE_API + "GetWordGraph",
        READ_ENGINES,
        _engine_request(engine_pb2.GetWordGraphRequest, segment="hi"),
        ok=(Code.FAILED_PRECONDITION,),
    ),
    Grpc(
        ENGINE_API + "TranslatePrefix",
        READ_ENGINES,
        _engine_request(engine_pb2.TranslatePrefixRequest, segment="hi", prefix="a", n=1),
        ok=(Code.FAILED_PRECONDITION,),
    ),
    Grpc(
        ENGINE_API + "TrainSegmentPair",
        UPDATE_ENGINES,
        _engine_request(engine_pb2.TrainSegmentPairRequest, source_segment="a", target_segment="b"),
        ok=(Code.FAILED_PRECONDITION,),
    ),
    Grpc(ENGINE_API + "StartBuild", UPDATE_ENGINES, _engine_request(engine_pb2.StartBuildRequest)),
    Grpc(
        ENGINE_API + "CancelBuild",
        UPDATE_ENGINES,
        _cancel_request,
    ),
    Grpc(
        ENGINE_API + "GetModelDownloadUrl",
        READ_ENGINES,
        _engine_request(engine_pb2.GetModelDownloadUrlRequest),
        ok=(Code.NOT_FOUND,),
    ),
    Grpc(
        ENGINE_API + "GetQueueSize",
        READ_ENGINES,
        lambda w: engine_pb2.GetQueueSizeRequest(engine_type="Nmt"),
        owned=False,
    ),
    Grpc(
        ENGINE_API + "GetLanguageInfo",
        READ_ENGINES,
        lambda w: engine_pb2.GetLanguageInfoRequest(engine_type="Nmt", language="en"),
        owned=False,
    ),
    Grpc(
        ENGINE_API + "WatchBuild",
        READ_ENGINES,
        lambda w: engine_pb2.WatchBuildRequest(engine_type="Nmt", engine_id=w.engine_id, build_id=w.build_id),
    ),
    Grpc(
        ADMIN_API + "CreateApiKey",
        ADMIN,
        lambda w: admin_pb2.CreateApiKeyRequest(owner="x", scopes=[READ_ENGINES]),
        owned=False,
    ),
    Grpc(ADMIN_API + "ListApiKeys", ADMIN, lambda w: admin_pb2.ListApiKeysRequest(), owned=False),
    Grpc(
        ADMIN_API + "SetApiKeyLimits",
        ADMIN,
        lambda w: admin_pb2.SetApiKeyLimitsRequest(
            id=w.key_id, limits=admin_pb2.ApiKeyLimits(translate_per_minute=100)
        ),
        owned=False,
    ),
    Grpc(
        ADMIN_API + "RevokeApiKey", ADMIN, lambda w: admin_pb2.RevokeApiKeyRequest(id=w.key_id), owned=False
    ),
    Grpc(
        ADMIN_API + "CreateNodeToken",
        ADMIN,
        lambda w: admin_pb2.CreateNodeTokenRequest(name="pool"),
        owned=False,
    ),
    Grpc(ADMIN_API + "ListNodeTokens", ADMIN, lambda w: empty_pb2.Empty(), owned=False),
    Grpc(
        ADMIN_API + "RevokeNodeToken",
        ADMIN,
        lambda w: admin_pb2.RevokeNodeTokenRequest(id=w.token_id),
        owned=False,
    ),
    Grpc(ADMIN_API + "ListNodes", ADMIN, lambda w: empty_pb2.Empty(), owned=False),
    Grpc(
        ADMIN_API + "DrainNode", ADMIN, lambda w: admin_pb2.DrainNodeRequest(node_id=w.node_id), owned=False
    ),
    Grpc(ADMIN_API + "UndrainNode", ADMIN, lambda w: admin_pb2.NodeRequest(node_id=w.node_id), owned=False),
    Grpc(
        ADMIN_API + "LoadEngine",
        ADMIN,
        lambda w: admin_pb2.NodeEngineRequest(node_id=w.node_id, engine_id=w.engine_id),
        ok=(Code.FAILED_PRECONDITION,),
        owned=False,
    ),
    Grpc(
        ADMIN_API + "UnloadEngine",
        ADMIN,
        lambda w: admin_pb2.NodeEngineRequest(node_id=w.node_id, engine_id=w.engine_id),
        ok=(Code.NOT_FOUND,),
        owned=False,
    ),
]

PUBLIC_GRPC_SERVICES = {
    "serval.health.v1.HealthApi": "health probe",
    "grpc.health.v1.Health": "standard health probe",
    "grpc.reflection.v1alpha.ServerReflection": "API description",
    "grpc.reflection.v1.ServerReflection": "API description",
}
SEPARATELY_AUTHENTICATED_GRPC_SERVICES = {
    "serval.translation.v1.TranslationPlatformApi": "job tokens: test_platform_api.py, test_jwt.py",
    "serval.word_alignment.v1.WordAlignmentPlatformApi": "job tokens: test_word_alignment.py",
    "serval.inference.v1.InferenceNodeApi": "node tokens: test_node_protocol.py, test_jwt.py",
}


pytestmark = pytest.mark.database


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    home: Path = tmp_path_factory.mktemp("access-matrix")
    with fresh_database(home) as database_url:
        api = ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0)
        running = RunningApi(Settings(home=home, database_url=database_url, api=api))
        try:
            yield running
        finally:
            running.close()


@pytest.fixture
def world(api: RunningApi) -> Iterator[World]:
    created = World(api)
    try:
        yield created
    finally:
        created.close()


def _rest_routes(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _rest_routes(included.routes, prefix + route.include_context.prefix)  # type: ignore[attr-defined]
        elif isinstance(route, Mount):
            yield "*", prefix + route.path
        else:
            for method in sorted(getattr(route, "methods", None) or {"*"}):
                if method != "HEAD":
                    yield method, prefix + route.path  # type: ignore[attr-defined]


def test_every_rest_route_is_in_the_table(api: RunningApi) -> None:
    assert api.service.services is not None
    routes = set(_rest_routes(create_app(api.service.services, ApiMetrics()).routes))  # with /metrics
    rows = [*REST_ENDPOINTS, *LIBRETRANSLATE_REST]
    tabled = {row.key for row in rows}
    assert len(tabled) == len(rows), "a REST route is in the table twice"
    missing = sorted(routes - tabled - PUBLIC_REST.keys())
    assert not missing, f"REST routes without a row in the access matrix: {missing}"
    stale = sorted(tabled - routes)
    assert not stale, f"rows for REST routes that do not exist: {stale}"
    gone = sorted(PUBLIC_REST.keys() - routes)
    assert not gone, f"public rows for REST routes that do not exist: {gone}"


def _grpc_methods(api: RunningApi) -> dict[str, list[str]]:
    database = ProtoReflectionDescriptorDatabase(api.channel)
    pool = descriptor_pool.DescriptorPool(database)
    return {
        name: [f"/{name}/{m.name}" for m in pool.FindServiceByName(name).methods]
        for name in database.get_services()
    }


def test_every_grpc_method_is_in_the_table(api: RunningApi) -> None:
    offered = _grpc_methods(api)
    unknown = sorted(set(offered) - set(PUBLIC_GRPC_SERVICES) - set(SEPARATELY_AUTHENTICATED_GRPC_SERVICES))
    tabled = {row.method for row in GRPC_ENDPOINTS}
    assert len(tabled) == len(GRPC_ENDPOINTS), "an RPC is in the table twice"
    client_methods = {m for name in unknown for m in offered[name]}
    missing = sorted(client_methods - tabled)
    assert not missing, f"RPCs without a row in the access matrix: {missing}"
    stale = sorted(tabled - client_methods)
    assert not stale, f"rows for RPCs the server does not offer: {stale}"


def _client(api: RunningApi, headers: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=api.rest_url, headers=headers, timeout=60)


def _without(*scopes: str) -> tuple[str, ...]:
    return tuple(s for s in ALL_SCOPES if s not in scopes)


def _owner_scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    """Key management's scopes come with `admin` only: a key never confers them itself."""
    return (ADMIN,) if any(s == ADMIN or s in API_KEY_SCOPES for s in scopes) else ALL_SCOPES


@contextlib.contextmanager
def _fresh_world(api: RunningApi) -> Iterator[World]:
    """A world of its own, for a second call of a row that may have deleted or started something."""
    created = World(api)
    try:
        yield created
    finally:
        created.close()


def _each_alone(scopes: tuple[str, ...]) -> list[tuple[str, ...]]:
    """For a call that several scopes grant, a key for each that lacks the others."""
    return (
        [_without(*(other for other in scopes if other != scope)) for scope in scopes]
        if len(scopes) > 1
        else []
    )


@pytest.mark.parametrize("row", REST_ENDPOINTS, ids=lambda r: f"{r.method} {r.path}")
def test_rest_access(api: RunningApi, world: World, row: Rest) -> None:
    def call(headers: dict[str, str]) -> httpx.Response:
        with _client(api, headers) as client:
            return row.call(world, client)

    anonymous = call({})
    assert anonymous.status_code == 401, anonymous.text
    assert call({"X-API-Key": "serval_not-a-key"}).status_code == 401
    if row.scopes:
        denied = call({"X-API-Key": api.api_key(OWNER, _without(*row.scopes))})
        assert denied.status_code == 403, denied.text
    if row.owned:
        # Another owner's engine, file or corpus answers 403, as Serval's `CheckOwnerAsync`;
        # webhooks (not Serval's) still answer 404. The stranger lacks `admin`: 403 on admin rows.
        stranger = call({"X-API-Key": api.api_key(OTHER_OWNER, ALL_SCOPES)})
        assert stranger.status_code == (404 if "{hook_id}" in row.path else 403), stranger.text
    allowed = call({"X-API-Key": api.api_key(OWNER, _owner_scopes(row.scopes))})
    assert allowed.status_code in row.ok_statuses, allowed.text
    for scopes in _each_alone(row.scopes):
        with _fresh_world(api) as fresh, _client(api, {"X-API-Key": api.api_key(OWNER, scopes)}) as client:
            alone = row.call(fresh, client)
        assert alone.status_code in row.ok_statuses, (scopes, alone.text)


@pytest.mark.parametrize("row", LIBRETRANSLATE_REST, ids=lambda r: f"{r.method} {r.path}")
def test_libretranslate_access(api: RunningApi, row: Rest) -> None:
    from serval_api.rest.libretranslate_protocol import INVALID_KEY, KEY_REQUIRED

    def call(key: str | None) -> httpx.Response:
        fields = {**(row.data or {}), **({"api_key": key} if key else {})}
        with _client(api, {}) as client:
            if row.method == "GET":
                return client.request(row.method, row.path, params=fields)
            return client.request(row.method, row.path, data=fields)

    anonymous = call(None)
    expected = LIBRETRANSLATE_WITHOUT_KEY.get(row.key)
    if expected is None:
        assert (anonymous.status_code, anonymous.json()) == (400, {"error": KEY_REQUIRED})
    else:
        assert anonymous.status_code == expected, anonymous.text
    assert (call("serval_not-a-key").status_code, call("serval_not-a-key").json()) == (
        403,
        {"error": INVALID_KEY},
    )
    assert isinstance(row.scope, str)
    denied = call(api.api_key(OWNER, _without(row.scope)))
    assert denied.status_code == 403 and row.scope in denied.json()["error"], denied.text
    allowed = call(api.api_key(OWNER, ALL_SCOPES))
    assert allowed.status_code in row.ok_statuses, allowed.text
    assert (
        allowed.json()["error"] not in (KEY_REQUIRED, INVALID_KEY) and "scope" not in allowed.json()["error"]
    )


def _invoke(api: RunningApi, row: Grpc, request: Any, metadata: tuple[tuple[str, str], ...]) -> Code:
    method = descriptor_pool.Default().FindMethodByName(row.method.strip("/").replace("/", "."))
    response_type = message_factory.GetMessageClass(method.output_type)
    kind = api.channel.unary_stream if method.server_streaming else api.channel.unary_unary
    stub = kind(
        row.method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_type.FromString,
    )
    try:
        if method.server_streaming:
            call = stub(request, metadata=metadata, timeout=10)
            next(iter(call))
            call.cancel()
        else:
            stub(request, metadata=metadata, timeout=10)
    except grpc.RpcError as e:
        return e.code()
    return Code.OK


@pytest.mark.parametrize("row", GRPC_ENDPOINTS, ids=lambda r: r.method)
def test_grpc_access(api: RunningApi, world: World, row: Grpc) -> None:
    request = row.request(world)

    def code(*metadata: tuple[str, str]) -> Code:
        return _invoke(api, row, request, metadata)

    assert code() == Code.UNAUTHENTICATED
    assert code(("x-api-key", "serval_not-a-key")) == Code.UNAUTHENTICATED
    if row.scopes:
        assert code(("x-api-key", api.api_key(OWNER, _without(*row.scopes)))) == Code.PERMISSION_DENIED
    if row.owned:
        assert code(("x-api-key", api.api_key(OTHER_OWNER, ALL_SCOPES))) == Code.PERMISSION_DENIED
    assert code(("x-api-key", api.api_key(OWNER, _owner_scopes(row.scopes)))) in row.ok
    for scopes in _each_alone(row.scopes):
        with _fresh_world(api) as fresh:
            alone = _invoke(api, row, row.request(fresh), (("x-api-key", api.api_key(OWNER, scopes)),))
        assert alone in row.ok, scopes
