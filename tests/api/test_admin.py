"""The admin surface over REST and gRPC: API keys, node tokens, nodes."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2

from serval.admin.v1 import admin_pb2, admin_pb2_grpc
from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, READ_ENGINES
from serval_api.db.nodes import upsert_node
from serval_api.service.keys import verify_node_token
from tests.api.conftest import RunningApi


@pytest.fixture
def admin(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(owner="ops", scopes=(ADMIN,)) as client:
        yield client


def test_api_keys_over_rest(api: RunningApi, admin: httpx.Client) -> None:
    created = admin.post("/admin/api-keys", json={"owner": "team-x", "scopes": [READ_ENGINES]})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["owner"] == "team-x" and body["scopes"] == [READ_ENGINES]
    key = body["key"]
    assert key.startswith("serval_") and key.startswith(body["prefix"])

    with httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key}) as team:
        assert team.get("/translation/engines").status_code == 200
        listed = admin.get("/admin/api-keys", params={"owner": "team-x"}).json()
        assert [k["id"] for k in listed] == [body["id"]]
        assert "key" not in listed[0]
        assert admin.delete(f"/admin/api-keys/{body['id']}").status_code == 200
        assert team.get("/translation/engines").status_code == 401
    assert admin.get("/admin/api-keys", params={"owner": "team-x"}).json()[0]["revokedAt"]
    assert admin.delete("/admin/api-keys/nope").status_code == 404


@pytest.mark.parametrize("scopes", [[], ["read engines"], ["READ:X"]])
def test_bad_scopes_are_400(admin: httpx.Client, scopes: list[str]) -> None:
    assert admin.post("/admin/api-keys", json={"owner": "x", "scopes": scopes}).status_code == 400


def test_empty_owner_is_400(admin: httpx.Client) -> None:
    response = admin.post("/admin/api-keys", json={"owner": " ", "scopes": list(ALL_ENGINE_SCOPES)})
    assert response.status_code == 400


def test_node_tokens_and_nodes_over_rest(api: RunningApi, admin: httpx.Client) -> None:
    assert api.service.services is not None
    db = api.service.services.db
    created = admin.post("/admin/node-tokens", json={"name": "gpu-pool"})
    assert created.status_code == 201
    token = created.json()["token"]
    assert api.run(verify_node_token(db, token))
    assert [t["name"] for t in admin.get("/admin/node-tokens").json()] == ["gpu-pool"]
    assert admin.delete(f"/admin/node-tokens/{created.json()['id']}").status_code == 200
    assert not api.run(verify_node_token(db, token))

    api.run(upsert_node(db, "gpu-7", device="cuda:0 int8_float16", free_slots=64))
    (node,) = admin.get("/admin/nodes").json()
    assert node["id"] == "gpu-7" and node["status"] == "connected"
    assert node["device"] == "cuda:0 int8_float16" and node["freeSlots"] == 64 and node["lastSeen"]


def test_admin_over_grpc(api: RunningApi) -> None:
    stub = admin_pb2_grpc.AdminApiStub(api.channel)
    as_admin = (("x-api-key", api.api_key("ops", (ADMIN,))),)
    created = stub.CreateApiKey(
        admin_pb2.CreateApiKeyRequest(owner="team-y", scopes=list(ALL_ENGINE_SCOPES)), metadata=as_admin
    )
    assert created.key.startswith("serval_") and created.api_key.owner == "team-y"
    listed = stub.ListApiKeys(admin_pb2.ListApiKeysRequest(owner="team-y"), metadata=as_admin)
    assert [k.id for k in listed.api_keys] == [created.api_key.id]
    assert not listed.api_keys[0].HasField("revoked_at")
    stub.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(id=created.api_key.id), metadata=as_admin)
    listed = stub.ListApiKeys(admin_pb2.ListApiKeysRequest(owner="team-y"), metadata=as_admin)
    assert listed.api_keys[0].HasField("revoked_at")

    token = stub.CreateNodeToken(admin_pb2.CreateNodeTokenRequest(name="pool"), metadata=as_admin)
    assert token.token.startswith("node_")
    names = stub.ListNodeTokens(empty_pb2.Empty(), metadata=as_admin).node_tokens
    assert [t.name for t in names] == ["pool"]
    stub.RevokeNodeToken(admin_pb2.RevokeNodeTokenRequest(id=token.node_token.id), metadata=as_admin)
    assert list(stub.ListNodes(empty_pb2.Empty(), metadata=as_admin).nodes) == []

    with pytest.raises(grpc.RpcError) as error:
        stub.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(id="nope"), metadata=as_admin)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as error:
        stub.ListNodes(empty_pb2.Empty(), metadata=(("x-api-key", api.api_key()),))
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
