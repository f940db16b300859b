"""The admin surface over REST and gRPC: API keys, node tokens, nodes."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2

from serval.admin.v1 import admin_pb2, admin_pb2_grpc
from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, READ_ENGINES, Caller
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


def test_a_scope_no_check_knows_is_refused_with_the_known_ones(admin: httpx.Client) -> None:
    """`read:engines` looks like a scope but no check reads it: a key holding it could do nothing."""
    response = admin.post("/admin/api-keys", json={"owner": "x", "scopes": ["read:engines", READ_ENGINES]})
    assert response.status_code == 400, response.text
    assert "read:engines" in response.text and READ_ENGINES in response.text
    assert admin.get("/admin/api-keys", params={"owner": "x"}).json() == []


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


def test_a_key_can_be_bound_to_one_of_its_owners_translation_engines(
    api: RunningApi, admin: httpx.Client
) -> None:
    """SIL Converters and LibreTranslate name no engine: a key bound to one translates with it.
    Only the owner's own translation engines can be bound, over REST, gRPC and the CLI alike."""
    from typer.testing import CliRunner

    from serval_cli.main import app
    from tests.api.conftest import create_engine

    with api.client("team-x") as team, api.client("team-y") as other:
        engine = create_engine(team)
        aligner = team.post(
            "/word-alignment/engines",
            json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"},
        ).json()
        theirs = create_engine(other)
    scopes = [READ_ENGINES]
    bound = admin.post(
        "/admin/api-keys", json={"owner": "team-x", "scopes": scopes, "engineId": engine["id"]}
    )
    assert bound.status_code == 201, bound.text
    assert bound.json()["engineId"] == engine["id"]
    listed = {k["id"]: k for k in admin.get("/admin/api-keys", params={"owner": "team-x"}).json()}
    assert listed[bound.json()["id"]]["engineId"] == engine["id"]
    assert services_caller(api, bound.json()["key"]).engine_id == engine["id"]
    refused = {
        theirs["id"]: 404,  # another owner's engine reads as unknown
        "nope-42": 404,
        "../x": 404,
    }
    for engine_id, status in refused.items():
        answer = admin.post(
            "/admin/api-keys", json={"owner": "team-x", "scopes": scopes, "engineId": engine_id}
        )
        assert answer.status_code == status, answer.text
    wa = admin.post("/admin/api-keys", json={"owner": "team-x", "scopes": scopes, "engineId": aligner["id"]})
    assert wa.status_code == 400 and "word-alignment engine" in wa.json()["message"]

    stub = admin_pb2_grpc.AdminApiStub(api.channel)
    as_admin = (("x-api-key", api.api_key("ops", (ADMIN,))),)
    created = stub.CreateApiKey(
        admin_pb2.CreateApiKeyRequest(owner="team-x", scopes=scopes, engine_id=engine["id"]),
        metadata=as_admin,
    )
    assert created.api_key.engine_id == engine["id"]
    with pytest.raises(grpc.RpcError) as foreign:
        stub.CreateApiKey(
            admin_pb2.CreateApiKeyRequest(owner="team-x", scopes=scopes, engine_id=theirs["id"]),
            metadata=as_admin,
        )
    assert foreign.value.code() == grpc.StatusCode.NOT_FOUND

    home = [
        "--home",
        str(api.service.settings.home),
        "--database-url",
        api.service.settings.resolved_database_url,
    ]
    runner = CliRunner()
    made = runner.invoke(
        app, ["admin", "api-key", "create", "--owner", "team-x", "--engine", engine["id"], *home]
    )
    assert made.exit_code == 0, made.output
    assert f"bound to engine {engine['id']}" in made.output
    assert services_caller(api, made.output.strip().splitlines()[-1]).engine_id == engine["id"]
    wrong = runner.invoke(
        app, ["admin", "api-key", "create", "--owner", "team-x", "--engine", theirs["id"], *home]
    )
    assert wrong.exit_code == 1 and "not found" in wrong.output


def services_caller(api: RunningApi, key: str) -> Caller:
    assert api.service.services is not None
    caller = api.run(api.service.services.lookups.caller(key))
    assert caller is not None
    return caller
