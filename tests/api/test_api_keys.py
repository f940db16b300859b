"""Serval 1.20's key management (`/api/v1/api-keys`) against the real API service: an
administrator makes a key for a client, the key acts as that client at once, lists and reads show
it without its secret, Delete revokes it at once; expiry holds at authentication; only an
administrator (or an allowed JWT with key management's scopes) reaches the four operations, and
bad input answers 400 with one short sentence."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_api.auth import (
    ADMIN,
    ALL_SCOPES,
    CREATE_API_KEYS,
    CREATE_ENGINES,
    DELETE_API_KEYS,
    GRANTABLE_SCOPES,
    READ_API_KEYS,
    READ_ENGINES,
)
from serval_api.db.models import utcnow
from serval_api.errors import MAX_MESSAGE_CHARS
from serval_api.service.keys import create_api_key
from serval_api.service.lookups import Lookups
from serval_common.settings import AuthSettings
from tests.api.conftest import RunningApi
from tests.api.test_jwt import AUDIENCE, ISSUER, SECRET, bearer_client, hs256, start_api
from tests.conformance.serval_client import NEWER
from tests.conformance.shapes import check

KEYS = "/api-keys"


@pytest.fixture
def admin(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client("the-admin", (ADMIN,)) as client:
        yield client


def new_key(admin: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {
        "clientId": "client-x",
        "name": "translator app",
        "scopes": [READ_ENGINES, CREATE_ENGINES],
        **fields,
    }
    response = admin.post(KEYS, json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def as_key(api: RunningApi, key: str) -> httpx.Client:
    return httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key}, timeout=60)


def test_a_created_key_acts_as_its_client_and_its_secret_is_shown_once(
    api: RunningApi, admin: httpx.Client
) -> None:
    answer = admin.post(
        KEYS,
        json={
            "clientId": "client-x",
            "name": "translator app",
            "scopes": [READ_ENGINES, CREATE_ENGINES],
            "expiresAt": "2999-01-01T12:00:00+02:00",
        },
    )
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert check(created, "ApiKeyCreated", release=NEWER) == []
    assert answer.headers["Location"] == created["url"] == f"{api.rest_url}/api/v1/api-keys/{created['id']}"
    assert created["key"].startswith("serval_")
    assert (created["clientId"], created["name"], created["scopes"]) == (
        "client-x",
        "translator app",
        [CREATE_ENGINES, READ_ENGINES],
    )
    assert datetime.fromisoformat(created["expiresAt"]) == datetime(2999, 1, 1, 10, tzinfo=UTC)
    assert "revokedAt" not in created

    with as_key(api, created["key"]) as client_x:
        made = client_x.post(
            "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "echo"}
        )
        assert made.status_code == 201, made.text
        assert client_x.get("/files").status_code == 403, "only the scopes granted"
    with api.client("client-x", (READ_ENGINES,)) as same_owner:
        assert [e["id"] for e in same_owner.get("/translation/engines").json()] == [made.json()["id"]]
    with api.client("client-y", (READ_ENGINES,)) as other_owner:
        assert other_owner.get("/translation/engines").json() == []

    read = admin.get(f"{KEYS}/{created['id']}")
    assert read.status_code == 200 and check(read.json(), "ApiKey", release=NEWER) == []
    assert read.json() == {k: v for k, v in created.items() if k != "key"}, "the secret is never shown again"
    listed = admin.get(KEYS).json()
    assert check(listed, "ApiKey[]", release=NEWER) == [] and all("key" not in k for k in listed)
    assert created["id"] in {k["id"] for k in listed}


def test_a_time_without_an_offset_is_utc(admin: httpx.Client) -> None:
    created = new_key(admin, expiresAt="2999-06-01T08:30:00")
    assert datetime.fromisoformat(created["expiresAt"]) == datetime(2999, 6, 1, 8, 30, tzinfo=UTC)


def test_get_all_lists_every_key_or_one_clients(api: RunningApi, admin: httpx.Client) -> None:
    a = new_key(admin, clientId="client-a")
    b = new_key(admin, clientId="client-b")
    made_by_cli = api.api_key("client-a", (READ_ENGINES,))  # no name: reads its prefix
    every = admin.get(KEYS).json()
    assert {a["id"], b["id"]} <= {k["id"] for k in every}
    only_a = admin.get(KEYS, params={"clientId": "client-a"}).json()
    assert {k["clientId"] for k in only_a} == {"client-a"} and len(only_a) == 2
    unnamed = next(k for k in only_a if k["id"] != a["id"])
    assert made_by_cli.startswith(unnamed["name"]), "a key made without a name reads its visible prefix"
    assert admin.get(KEYS, params={"clientId": "nobody"}).json() == []
    assert admin.get(KEYS, params={"clientId": "x" * 5000}).json() == []


def test_delete_revokes_at_once_and_keeps_the_record(api: RunningApi, admin: httpx.Client) -> None:
    created = new_key(admin)
    with as_key(api, created["key"]) as client_x:
        assert client_x.get("/translation/engines").status_code == 200  # now in the lookups' cache
        assert admin.delete(f"{KEYS}/{created['id']}").status_code == 200
        refused = client_x.get("/translation/engines")
        assert refused.status_code == 401, "revoked at once, though the key was just used"
    revoked = admin.get(f"{KEYS}/{created['id']}").json()
    assert check(revoked, "ApiKey", release=NEWER) == [] and revoked["revokedAt"]
    assert admin.delete(f"{KEYS}/{created['id']}").status_code == 200, "revoking again changes nothing"
    assert admin.get(f"{KEYS}/{created['id']}").json()["revokedAt"] == revoked["revokedAt"]


@pytest.mark.parametrize("key_id", ["0123456789abcdef01234567", "x" * 65, "%00"])
def test_unknown_keys_are_404(admin: httpx.Client, key_id: str) -> None:
    for method in ("GET", "DELETE"):
        answer = admin.request(method, f"{KEYS}/{key_id}")
        assert answer.status_code == 404, answer.text
        assert "not found" in answer.json()["message"]


def test_an_expired_key_authenticates_nothing(api: RunningApi) -> None:
    assert api.service.services is not None
    db = api.service.services.db
    _, expired = api.run(
        create_api_key(db, "client-x", [READ_ENGINES], name="old", expires_at=utcnow() - timedelta(seconds=1))
    )
    with as_key(api, expired) as client:
        answer = client.get("/translation/engines")
    assert answer.status_code == 401, answer.text


def test_a_kept_key_stops_at_its_expiry(api: RunningApi) -> None:
    """The lookups' cache (here kept for an hour) never outlives the key's `expiresAt`. The key
    lives a moment; a loaded machine may take longer than that to look it up once, so the test
    tries again with a longer life until the first lookup comes before the expiry."""
    assert api.service.services is not None
    services = api.service.services
    lookups = Lookups(services.db, services.changes, ttl_s=3600)

    async def before_and_after(life_s: float) -> tuple[Any, Any] | None:
        expires_at = utcnow() + timedelta(seconds=life_s)
        _, key = await create_api_key(
            services.db, "client-x", [READ_ENGINES], name="brief", expires_at=expires_at
        )
        before = await lookups.caller(key)
        if utcnow() >= expires_at:
            return None  # looked up too late to tell
        while utcnow() <= expires_at:
            await asyncio.sleep(0.05)
        return before, await lookups.caller(key)

    seen = next(filter(None, (api.run(before_and_after(life_s)) for life_s in (0.3, 1, 3, 10))), None)
    assert seen is not None, "the key was never looked up before its expiry"
    before, after = seen
    assert before is not None and before.owner == "client-x"
    assert after is None


def test_an_ordinary_key_never_reaches_key_management(api: RunningApi, admin: httpx.Client) -> None:
    """Owner A's key, with every scope a key may hold, cannot list, read, revoke or make keys:
    not B's, not its own."""
    b = new_key(admin, clientId="owner-b")
    a_key = api.api_key("owner-a", tuple(GRANTABLE_SCOPES))
    with as_key(api, a_key) as owner_a:
        calls = [
            owner_a.get(KEYS),
            owner_a.get(KEYS, params={"clientId": "owner-b"}),
            owner_a.get(f"{KEYS}/{b['id']}"),
            owner_a.delete(f"{KEYS}/{b['id']}"),
            owner_a.post(KEYS, json={"clientId": "owner-a", "name": "more", "scopes": [READ_ENGINES]}),
        ]
    for answer in calls:
        assert answer.status_code == 403, answer.text
        assert b["id"] not in answer.text and "owner-b" not in answer.text
    assert admin.get(f"{KEYS}/{b['id']}").json().get("revokedAt") is None
    with as_key(api, b["key"]) as owner_b:
        assert owner_b.get("/translation/engines").status_code == 200, "B's key still works"


def test_a_key_never_confers_key_managements_scopes(api: RunningApi) -> None:
    """Even a key whose record holds them (written directly, as no API call can) is refused, as
    Serval drops them when a key authenticates."""
    assert api.service.services is not None
    _, key = api.run(
        create_api_key(api.service.services.db, "owner-a", [CREATE_API_KEYS, READ_API_KEYS, DELETE_API_KEYS])
    )
    with as_key(api, key) as client:
        assert client.get(KEYS).status_code == 403
        made = client.post(KEYS, json={"clientId": "owner-a", "name": "n", "scopes": [READ_ENGINES]})
        assert made.status_code == 403


NOW = datetime.now(UTC)
GOOD: dict[str, Any] = {"clientId": "client-x", "name": "app", "scopes": [READ_ENGINES]}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"clientId": ...}, "clientId"),
        ({"clientId": "  "}, "clientId must not be empty"),
        ({"clientId": "a\x00b"}, "clientId: control characters"),
        ({"clientId": "x" * 201}, "clientId: 201 characters; the limit is 200"),
        ({"name": ...}, "name"),
        ({"name": ""}, "name must not be empty"),
        ({"name": "line\nbreak"}, "name: control characters"),
        ({"name": "n" * 201}, "name: 201 characters; the limit is 200"),
        ({"name": "n" * 900_000}, "name: 900000 characters; the limit is 200"),
        ({"name": 42}, "name"),
        ({"scopes": []}, "scopes: name at least one scope"),
        ({"scopes": ...}, "scopes"),
        ({"scopes": "read:files"}, "scopes"),
        ({"scopes": ["admin"]}, "scopes: 'admin' cannot be granted to an API key"),
        ({"scopes": [READ_ENGINES, CREATE_API_KEYS]}, "scopes: 'create:api_keys' cannot be granted"),
        (
            {"scopes": ["read:api_keys", "delete:api_keys"]},
            "'read:api_keys', 'delete:api_keys' cannot be granted",
        ),
        ({"scopes": ["everything"]}, "scopes: 'everything' cannot be granted"),
        ({"scopes": [READ_ENGINES] * 65}, "scopes: 65 items; the limit is 64"),
        ({"expiresAt": (NOW - timedelta(days=1)).isoformat()}, "expiresAt: "),
        ({"expiresAt": "2001-01-01T00:00:00"}, "is not in the future"),
        ({"expiresAt": "tomorrow"}, "expiresAt"),
        ({"expiresAt": "10000-01-01T00:00:00Z"}, "expiresAt"),
        ({"expiresAt": "9999-12-31T23:00:00-14:00"}, "expiresAt: not a date this service can hold"),
        ({"expiresAt": "9999-06-01T00:00:00Z"}, "expiresAt: give a date before the year 9999"),
    ],
)
def test_bad_configs_answer_400_with_a_short_sentence(
    api: RunningApi, admin: httpx.Client, change: dict[str, Any], says: str
) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not ...}
    before = len(admin.get(KEYS).json())
    answer = admin.post(KEYS, json=body)
    assert answer.status_code == 400, answer.text
    message = answer.json()["message"]
    assert says in message, message
    assert len(message) <= MAX_MESSAGE_CHARS and "\n" not in message
    assert len(admin.get(KEYS).json()) == before, "a refused request makes nothing"


def test_serval_scope_names_this_service_does_not_check_may_be_granted(admin: httpx.Client) -> None:
    """An administrator's tool granting Serval's whole grantable list works."""
    scopes = sorted(GRANTABLE_SCOPES)
    assert new_key(admin, scopes=scopes)["scopes"] == scopes
    assert set(ALL_SCOPES) <= GRANTABLE_SCOPES and ADMIN not in GRANTABLE_SCOPES


@pytest.fixture
def jwt_api(tmp_path: Path, database_url: str, request: pytest.FixtureRequest) -> Iterator[RunningApi]:
    auth = AuthSettings(
        jwt_secret=SECRET, jwt_audience=AUDIENCE, jwt_issuer=ISSUER, jwt_admin_scope_allowed=request.param
    )
    running = start_api(tmp_path, database_url, auth)
    try:
        yield running
    finally:
        running.close()


@pytest.mark.parametrize("jwt_api", [False, True], indirect=True, ids=["not-allowed", "allowed"])
def test_a_jwt_holds_key_managements_scopes_only_where_admin_is_allowed(jwt_api: RunningApi) -> None:
    token = hs256(scope=f"{CREATE_API_KEYS} {READ_API_KEYS} {DELETE_API_KEYS} {READ_ENGINES}")
    allowed = jwt_api.service.settings.auth.jwt_admin_scope_allowed
    with bearer_client(jwt_api, token) as client:
        made = client.post(KEYS, json={**GOOD, "clientId": "client-z"})
        listed = client.get(KEYS)
        assert client.get("/translation/engines").status_code == 200, "the other scopes stay"
    if allowed:
        assert made.status_code == 201 and listed.status_code == 200, made.text
        with as_key(jwt_api, made.json()["key"]) as client_z:
            assert client_z.get("/translation/engines").status_code == 200
    else:
        assert (made.status_code, listed.status_code) == (403, 403), made.text
