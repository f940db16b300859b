from __future__ import annotations

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ADMIN, CREATE_ENGINES, READ_ENGINES, READ_STATUS, Caller
from serval_api.service import admin
from serval_api.service.keys import (
    authenticate_api_key,
    create_node_token,
    list_api_keys,
    list_node_tokens,
    revoke_api_key,
    revoke_node_token,
    verify_node_token,
)
from tests.api.conftest import RunningApi
from tests.helpers import wait_until


def test_rest_without_or_with_a_bad_key_is_401(api: RunningApi) -> None:
    with httpx.Client(base_url=f"{api.rest_url}/api/v1") as anonymous:
        assert anonymous.get("/translation/engines").status_code == 401
        bad = anonymous.get("/translation/engines", headers={"X-API-Key": "serval_nope"})
        assert bad.status_code == 401
        assert bad.json()["message"]
        assert anonymous.get("/status/ping").status_code == 200
        assert anonymous.get("/status/health").status_code == 401


def test_missing_scope_is_403(api: RunningApi) -> None:
    with api.client(scopes=(READ_ENGINES,)) as reader:
        assert reader.get("/translation/engines").status_code == 200
        denied = reader.post(
            "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
        )
        assert denied.status_code == 403
        assert "create:translation_engines" in denied.json()["message"]


def test_revoked_key_is_refused(api: RunningApi) -> None:
    """Revoked through the admin API: refused at once, although the key's record is cached."""
    services = api.service.services
    assert services is not None
    key = api.api_key()
    caller = api.run(authenticate_api_key(services.db, key))
    assert caller is not None and caller.owner == "owner-a"
    assert key.startswith("serval_")
    with httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key}) as c:
        assert c.get("/translation/engines").status_code == 200
        record = next(k for k in api.run(list_api_keys(services.db, "owner-a")) if key.startswith(k.prefix))
        api.run(admin.revoke_api_key(services, Caller(owner="root", scopes=frozenset({ADMIN})), record.id))
        assert c.get("/translation/engines").status_code == 401


def test_key_revoked_in_the_database_is_refused_within_the_cache_time(api: RunningApi) -> None:
    """`serval admin api-key revoke` writes the database alone: the cached record lasts at most
    `api.lookup_cache_s`."""
    services = api.service.services
    assert services is not None
    key = api.api_key()
    with httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key}) as c:
        assert c.get("/translation/engines").status_code == 200
        record = next(k for k in api.run(list_api_keys(services.db, "owner-a")) if key.startswith(k.prefix))
        api.run(revoke_api_key(services.db, record.id))
        limit = services.settings.api.lookup_cache_s
        wait_until(lambda: c.get("/translation/engines").status_code == 401, limit + 5, "the revocation")


def test_grpc_without_key_is_unauthenticated(api: RunningApi) -> None:
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    with pytest.raises(grpc.RpcError) as error:
        stub.Translate(engine_pb2.TranslateRequest(engine_type="Nmt", engine_id="x", segment="hi"))
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_node_tokens(api: RunningApi) -> None:
    assert api.service.services is not None
    db = api.service.services.db
    record, token = api.run(create_node_token(db, "gpu-1"))
    assert api.run(verify_node_token(db, token))
    assert not api.run(verify_node_token(db, token + "x"))
    assert not api.run(verify_node_token(db, ""))
    assert [t.name for t in api.run(list_node_tokens(db))] == ["gpu-1"]
    api.run(revoke_node_token(db, record.id))
    assert not api.run(verify_node_token(db, token))


def test_health_needs_read_status_and_is_degraded_without_nodes(api: RunningApi) -> None:
    """Serval's `StatusTests.GetHealthAsync`: `read:status` 200, no credentials 401 (above),
    another scope 403; `status/ping` stays open for probes."""
    with api.client(scopes=(READ_STATUS,)) as client:
        health = client.get("/status/health")
    assert health.status_code == 200
    assert health.json()["status"] == "Degraded"
    assert health.json()["results"]["nodes"]["data"]["connected"] == "0"
    with api.client(scopes=(CREATE_ENGINES,)) as other:
        refused = other.get("/status/health")
        assert refused.status_code == 403 and "read:status" in refused.json()["message"]
        assert other.get("/status/ping").status_code == 200
