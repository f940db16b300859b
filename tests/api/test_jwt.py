"""Bearer JWTs as client credentials (HS256 secret, RS256 via a local JWKS), and the separation of
client credentials from node tokens and job tokens."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import grpc
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from google.protobuf import empty_pb2

from serval.admin.v1 import admin_pb2_grpc
from serval.inference.v1 import node_pb2
from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_api.auth import ALL_ENGINE_SCOPES, READ_ENGINES
from serval_api.jwt_verifier import scopes_of
from serval_api.service.keys import create_node_token
from serval_common.settings import ApiSettings, AuthSettings, Settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_node_protocol import ScriptedNode

SECRET = "test-secret-that-is-long-enough-for-hs256"
AUDIENCE = "serval-tests"
ISSUER = "https://issuer.test/"
KID = "test-key-1"


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sub": "jwt-owner",
        "scope": " ".join(ALL_ENGINE_SCOPES),
        "aud": AUDIENCE,
        "iss": ISSUER,
        "exp": int(time.time()) + 300,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def hs256(secret: str = SECRET, **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), secret, algorithm="HS256")


def start_api(tmp_path: Path, database_url: str, auth: AuthSettings) -> RunningApi:
    api = ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0)
    return RunningApi(Settings(home=tmp_path, database_url=database_url, api=api, auth=auth))


def bearer_client(api: RunningApi, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{api.rest_url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


@pytest.fixture
def hs_api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    running = start_api(
        tmp_path, database_url, AuthSettings(jwt_secret=SECRET, jwt_audience=AUDIENCE, jwt_issuer=ISSUER)
    )
    try:
        yield running
    finally:
        running.close()


class _Jwks:
    """Serves one RSA public key as a JWKS on 127.0.0.1."""

    def __init__(self) -> None:
        self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private_key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]}).encode()
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def token(self, key: Any = None, kid: str = KID, **overrides: Any) -> str:
        return jwt.encode(
            claims(**overrides), key or self.private_key, algorithm="RS256", headers={"kid": kid}
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks() -> Iterator[_Jwks]:
    served = _Jwks()
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def rs_api(tmp_path: Path, database_url: str, jwks: _Jwks) -> Iterator[RunningApi]:
    running = start_api(tmp_path, database_url, AuthSettings(jwks_url=jwks.url, jwt_audience=AUDIENCE))
    try:
        yield running
    finally:
        running.close()


def test_hs256_token_is_accepted_on_rest_and_grpc(hs_api: RunningApi) -> None:
    token = hs256()
    with bearer_client(hs_api, token) as client:
        engine = create_engine(client)
        listed = client.get("/translation/engines")
        assert listed.status_code == 200
        assert [e["id"] for e in listed.json()] == [engine["id"]]
    with hs_api.client(owner="jwt-owner") as same_owner_by_key:
        assert same_owner_by_key.get(f"/translation/engines/{engine['id']}").status_code == 200
    stub = engine_pb2_grpc.TranslationEngineApiStub(hs_api.channel)
    stub.Update(
        engine_pb2.UpdateRequest(engine_type="Nmt", engine_id=engine["id"], target_language="fr"),
        metadata=(("authorization", f"Bearer {token}"),),
    )


def test_scopes_come_from_the_token(hs_api: RunningApi) -> None:
    with bearer_client(hs_api, hs256(scope=None, permissions=[READ_ENGINES])) as reader:
        assert reader.get("/translation/engines").status_code == 200
        denied = reader.post(
            "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
        )
        assert denied.status_code == 403


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (lambda: hs256(exp=int(time.time()) - 60), "expired"),
        (lambda: hs256(secret="another-secret-that-is-also-long-enough"), "bad signature"),
        (lambda: hs256(sub=None), "sub"),
        (lambda: hs256(aud="someone-else"), "audience"),
        (lambda: hs256(iss="https://evil.test/"), "issuer"),
        (lambda: "not-a-jwt", "not a JWT"),
    ],
    ids=["expired", "bad-signature", "missing-sub", "wrong-audience", "wrong-issuer", "garbage"],
)
def test_bad_tokens_are_401(hs_api: RunningApi, token: Any, message: str) -> None:
    value = token()
    with bearer_client(hs_api, value) as client:
        response = client.get("/translation/engines")
    assert response.status_code == 401
    assert message in response.json()["message"]
    stub = engine_pb2_grpc.TranslationEngineApiStub(hs_api.channel)
    with pytest.raises(grpc.RpcError) as error:
        stub.GetQueueSize(
            engine_pb2.GetQueueSizeRequest(engine_type="Nmt"),
            metadata=(("authorization", f"Bearer {value}"),),
        )
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert message in (error.value.details() or "")


def test_bearer_tokens_are_refused_when_jwt_is_not_configured(api: RunningApi) -> None:
    with bearer_client(api, hs256()) as client:
        response = client.get("/translation/engines")
    assert response.status_code == 401
    assert response.json()["message"] == "JWT authentication is not configured"


def test_rs256_token_verified_through_jwks(rs_api: RunningApi, jwks: _Jwks) -> None:
    with bearer_client(rs_api, jwks.token()) as client:
        assert client.get("/translation/engines").status_code == 200
        assert client.get("/translation/engines").status_code == 200
    assert jwks.requests == 1, "the JWKS is cached"

    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with bearer_client(rs_api, jwks.token(key=stranger)) as client:
        forged = client.get("/translation/engines")
    assert forged.status_code == 401
    assert "signature" in forged.json()["message"]

    with bearer_client(rs_api, jwks.token(kid="unknown-kid")) as client:
        assert client.get("/translation/engines").status_code == 401
    with bearer_client(rs_api, hs256()) as client:
        refused = client.get("/translation/engines")
    assert refused.status_code == 401
    assert "HS256" in refused.json()["message"]


def test_scope_claim_shapes() -> None:
    assert scopes_of({"scope": "a b  c"}) == {"a", "b", "c"}
    assert scopes_of({"scopes": ["a", "b"]}) == {"a", "b"}
    assert scopes_of({"permissions": ["x"], "scope": "y"}) == {"x", "y"}
    assert scopes_of({"scope": 3, "permissions": [None, ""]}) == frozenset()


def test_node_token_is_no_client_credential(hs_api: RunningApi) -> None:
    assert hs_api.service.services is not None
    _, node_token = hs_api.run(create_node_token(hs_api.service.services.db, "gpu"))
    for headers in ({"X-API-Key": node_token}, {"Authorization": f"Bearer {node_token}"}):
        with httpx.Client(base_url=f"{hs_api.rest_url}/api/v1", headers=headers) as client:
            assert client.get("/translation/engines").status_code == 401
    stub = engine_pb2_grpc.TranslationEngineApiStub(hs_api.channel)
    for metadata in ((("x-api-key", node_token),), (("authorization", f"Bearer {node_token}"),)):
        with pytest.raises(grpc.RpcError) as error:
            stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="Nmt"), metadata=metadata)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_job_token_is_no_client_credential_and_client_credentials_are_no_job_token(
    hs_api: RunningApi,
) -> None:
    with hs_api.client() as client:
        engine = create_engine(client)
        assert client.post(f"/translation/engines/{engine['id']}/builds", json={}).status_code == 201
    spec = hs_api.launcher.specs[-1]
    with bearer_client(hs_api, spec.job_token) as as_job:
        assert as_job.get("/translation/engines").status_code == 401

    platform = platform_pb2_grpc.TranslationPlatformApiStub(hs_api.channel)
    for metadata in (
        (("authorization", f"Bearer {hs_api.api_key()}"),),
        (("authorization", f"Bearer {hs256()}"),),
        (("x-api-key", hs_api.api_key()),),
    ):
        with pytest.raises(grpc.RpcError) as error:
            platform.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=metadata)
        assert error.value.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


@pytest.mark.parametrize("credential", ["api-key", "jwt"])
def test_client_credentials_are_no_node_token(hs_api: RunningApi, credential: str) -> None:
    token = hs_api.api_key() if credential == "api-key" else hs256()
    node = ScriptedNode(hs_api.grpc_target, token)
    try:
        node.hello()
        assert node.read().rejection.reason == node_pb2.REJECTION_REASON_BAD_TOKEN
    finally:
        node.close()


@pytest.mark.parametrize(
    "aud", ["someone-else", None, ["someone-else", "another"]], ids=["wrong", "missing", "list-without-ours"]
)
def test_the_audience_is_checked_when_set(hs_api: RunningApi, aud: Any) -> None:
    token = hs256(aud=aud)
    with bearer_client(hs_api, token) as client:
        response = client.get("/translation/engines")
    assert response.status_code == 401, response.text
    assert "aud" in response.json()["message"]
    stub = engine_pb2_grpc.TranslationEngineApiStub(hs_api.channel)
    with pytest.raises(grpc.RpcError) as error:
        stub.GetQueueSize(
            engine_pb2.GetQueueSizeRequest(engine_type="Nmt"),
            metadata=(("authorization", f"Bearer {token}"),),
        )
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with bearer_client(hs_api, hs256(aud=["another", AUDIENCE])) as client:
        assert client.get("/translation/engines").status_code == 200, "one of several audiences is ours"


def admin_calls(api: RunningApi, token: str) -> tuple[int, grpc.StatusCode]:
    """The admin API's answer to `token` over REST (status code) and gRPC (status)."""
    with bearer_client(api, token) as client:
        rest = client.get("/admin/api-keys").status_code
    stub = admin_pb2_grpc.AdminApiStub(api.channel)
    try:
        stub.ListNodeTokens(empty_pb2.Empty(), metadata=(("authorization", f"Bearer {token}"),))
    except grpc.RpcError as error:
        return rest, error.code()
    return rest, grpc.StatusCode.OK


def test_a_jwt_admin_scope_is_dropped_unless_allowed(hs_api: RunningApi) -> None:
    token = hs256(scope="admin " + " ".join(ALL_ENGINE_SCOPES))
    assert admin_calls(hs_api, token) == (403, grpc.StatusCode.PERMISSION_DENIED)
    with bearer_client(hs_api, hs256(scope="admin")) as only_admin:
        assert only_admin.get("/translation/engines").status_code == 403, "admin granted nothing"
    with bearer_client(hs_api, token) as client:
        assert client.get("/translation/engines").status_code == 200, "the other scopes stay"


def test_a_jwt_admin_scope_counts_when_allowed(tmp_path: Path, database_url: str) -> None:
    api = start_api(
        tmp_path,
        database_url,
        AuthSettings(
            jwt_secret=SECRET, jwt_audience=AUDIENCE, jwt_issuer=ISSUER, jwt_admin_scope_allowed=True
        ),
    )
    try:
        assert admin_calls(api, hs256(scope="admin")) == (200, grpc.StatusCode.OK)
        assert admin_calls(api, hs256()) == (403, grpc.StatusCode.PERMISSION_DENIED)
    finally:
        api.close()
