"""Per-key limits (serval_api/service/quotas.py, docs/limits.md) on a real API service over
loopback: translate-type requests per minute per key, build starts per hour per owner, concurrent
long polls per key, characters per request; refused with 429 + Retry-After (REST), RESOURCE_EXHAUSTED
+ `retry-after` trailing metadata (gRPC), and each dialect's own error shape; an administrator's
override. The PostgreSQL tests: two replicas share one key's budget and a restart resets nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from typer.testing import CliRunner

from serval.admin.v1 import admin_pb2, admin_pb2_grpc
from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, Caller, KeyLimits
from serval_api.service.keys import create_api_key
from serval_cli.main import app
from serval_common.settings import ApiSettings, LimitSettings, Settings
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.helpers import TEST_DATABASE_URL

TRANSLATE_PER_MINUTE = 5
BUILD_STARTS_PER_HOUR = 3
CONCURRENT_LONG_POLLS = 2
REFUSAL_DELAY_S = 0.3
"""How long a refusal is held (1 s by default): short, so the tests refuse quickly."""
PARKED_S = 20.0
"""How long a long poll of these tests waits: longer than any test needs it to."""
LIMITS = LimitSettings(
    translate_per_minute=TRANSLATE_PER_MINUTE,
    build_starts_per_hour=BUILD_STARTS_PER_HOUR,
    concurrent_long_polls=CONCURRENT_LONG_POLLS,
    refusal_delay_s=REFUSAL_DELAY_S,
)


def limited_settings(tmp_path: Path, database_url: str, name: str = "replica-a") -> Settings:
    return Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, instance_id=name),
        limits=LIMITS,
    )


@pytest.fixture
def limited(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    running = RunningApi(limited_settings(tmp_path, database_url))
    try:
        yield running
    finally:
        running.close()


def key(api: RunningApi, owner: str = "owner-a", overrides: KeyLimits | None = None, **fields: Any) -> str:
    assert api.service.services is not None
    _, plaintext = api.run(
        create_api_key(api.service.services.db, owner, ALL_ENGINE_SCOPES, overrides=overrides, **fields)
    )
    return plaintext


def rest(api: RunningApi, api_key: str) -> httpx.Client:
    return httpx.Client(base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": api_key}, timeout=30)


def not_near_a_window_end(window_s: int = 60, margin_s: float = 8.0) -> None:
    """Counted in fixed windows aligned to the clock: a test that fills one starts early enough in
    it that the window does not end under it."""
    left = window_s - time.time() % window_s
    if left < margin_s:
        time.sleep(left + 0.1)


def built_echo_engine(api: RunningApi, api_key: str) -> str:
    """An echo engine of the key's owner, built (it translates without a node); its path."""
    with rest(api, api_key) as client:
        engine = create_engine(client, engine_type="echo")
        base = f"/translation/engines/{engine['id']}"
        build = client.post(f"{base}/builds", json={})
        assert build.status_code == 201, build.text
        assert wait_for_build(client, build.json())["state"] == "Completed"
    return base


def assert_refused(answer: httpx.Response, window_s: int = 60) -> str:
    """429 with a Retry-After within the window; the message."""
    assert answer.status_code == 429, answer.text
    retry_after = int(answer.headers["Retry-After"])
    assert 1 <= retry_after <= window_s
    body = answer.json()
    message: str = body.get("message") or body["error"]
    assert "try again" in message
    return message


def translate_stub(api: RunningApi) -> engine_pb2_grpc.TranslationEngineApiStub:
    return engine_pb2_grpc.TranslationEngineApiStub(api.channel)


def grpc_refusal(call: Any) -> tuple[grpc.StatusCode, dict[str, str], str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error: Any = raised.value
    return error.code(), dict(error.trailing_metadata() or ()), error.details()


def test_a_key_over_its_translate_limit_is_refused_while_another_key_keeps_its_full_rate(
    limited: RunningApi,
) -> None:
    hostile, polite = key(limited), key(limited)
    base = built_echo_engine(limited, hostile)
    engine_id = base.rsplit("/", 1)[1]
    not_near_a_window_end()
    with rest(limited, hostile) as client:
        calls = [
            lambda: client.post(f"{base}/translate", json="Hello"),
            lambda: client.post(f"{base}/translate/2", json="Hello"),
            lambda: client.post(f"{base}/get-word-graph", json="Hello"),
            lambda: client.post(f"{base}/translate", json="Hello"),
            lambda: client.post(f"{base}/translate", json="Hello"),
        ]
        assert [call().status_code for call in calls] == [200] * TRANSLATE_PER_MINUTE
        began = time.monotonic()
        message = assert_refused(client.post(f"{base}/translate", json="Hello"))
        assert time.monotonic() - began >= REFUSAL_DELAY_S, "a refusal is held before it is sent"
        assert f"{TRANSLATE_PER_MINUTE} translation requests a minute" in message
        assert_refused(
            client.post(
                f"{base}/train-segment",
                json={"sourceSegment": "a", "targetSegment": "a", "sentenceStart": True},
            )
        )

    request = engine_pb2.TranslateRequest(engine_type="Echo", engine_id=engine_id, segment="Hello", n=1)
    code, trailing, details = grpc_refusal(
        lambda: translate_stub(limited).Translate(request, metadata=(("x-api-key", hostile),))
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert 1 <= int(trailing["retry-after"]) <= 60
    assert "try again" in details

    with rest(limited, polite) as client:
        answers = [
            client.post(f"{base}/translate", json="Hello").status_code for _ in range(TRANSLATE_PER_MINUTE)
        ]
    assert answers == [200] * TRANSLATE_PER_MINUTE, "the other key of the same owner has its full rate"
    assert translate_stub(limited).Translate(request, metadata=(("x-api-key", key(limited)),)).results


def test_build_starts_per_hour_per_owner(limited: RunningApi) -> None:
    not_near_a_window_end(3600, 30.0)
    with rest(limited, key(limited, "builder")) as client:
        engines = [create_engine(client)["id"] for _ in range(BUILD_STARTS_PER_HOUR + 1)]
        started = [client.post(f"/translation/engines/{e}/builds", json={}) for e in engines]
        assert [a.status_code for a in started[:-1]] == [201] * BUILD_STARTS_PER_HOUR
        message = assert_refused(started[-1], 3600)
        assert f"{BUILD_STARTS_PER_HOUR} builds an hour" in message
    with rest(limited, key(limited, "builder")) as client:
        assert_refused(client.post(f"/translation/engines/{engines[-1]}/builds", json={}), 3600)
    with rest(limited, key(limited, "another-owner")) as client:
        engine = create_engine(client)["id"]
        assert client.post(f"/translation/engines/{engine}/builds", json={}).status_code == 201


def pending_build(client: httpx.Client) -> tuple[str, str, int]:
    engine = create_engine(client)["id"]
    build = client.post(f"/translation/engines/{engine}/builds", json={})
    assert build.status_code == 201, build.text
    return engine, build.json()["id"], build.json()["revision"]


def test_concurrent_long_polls_per_key(limited: RunningApi) -> None:
    assert limited.service.services is not None
    limited.service.services.long_poll_max_s = PARKED_S
    hostile, polite = key(limited), key(limited)
    with rest(limited, hostile) as client:
        engine, build_id, revision = pending_build(client)
    url = f"/translation/engines/{engine}/builds/{build_id}"
    far = {"min-revision": revision + 1}
    with ThreadPoolExecutor(4) as pool, rest(limited, hostile) as waiting, rest(limited, polite) as other:
        parked = [pool.submit(waiting.get, url, params=far) for _ in range(CONCURRENT_LONG_POLLS)]
        time.sleep(1.0)
        assert not any(p.done() for p in parked), [p.result().text for p in parked if p.done()]
        message = assert_refused(waiting.get(url, params=far))
        assert f"may wait on {CONCURRENT_LONG_POLLS} at once" in message
        feed = waiting.get(
            "/translation/builds/next-finished", params={"finished-after": "2020-01-01T00:00:00Z"}
        )
        assert_refused(feed)
        assert_refused(waiting.get(f"/translation/engines/{engine}/current-build", params=far))

        stream = translate_stub(limited).WatchBuild(
            engine_pb2.WatchBuildRequest(engine_id=engine, build_id=build_id, min_revision=revision),
            metadata=(("x-api-key", hostile),),
        )
        code, trailing, _ = grpc_refusal(lambda: list(stream))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert int(trailing["retry-after"]) >= 1

        other_poll = pool.submit(other.get, url, params=far)
        time.sleep(1.0)
        assert not other_poll.done(), "another key's long poll waits as usual"
        # A poll that ends frees its place: answered by a change to the build.
        with rest(limited, hostile) as client:
            client.post(f"/translation/engines/{engine}/current-build/cancel")
        for poll in [*parked, other_poll]:
            assert poll.result(timeout=PARKED_S + 10).status_code in (200, 408)
    with rest(limited, hostile) as client:
        engine2, build2, revision2 = pending_build(client)
        with ThreadPoolExecutor(1) as pool:
            again = pool.submit(
                client.get,
                f"/translation/engines/{engine2}/builds/{build2}",
                params={"min-revision": revision2 + 1},
            )
            time.sleep(1.0)
            assert not again.done(), "the key's long polls ended, so it may wait again"
            client.post(f"/translation/engines/{engine2}/current-build/cancel")
            assert again.result(timeout=PARKED_S + 10).status_code == 200


def test_characters_per_request_per_key(limited: RunningApi) -> None:
    owner_key = key(limited)
    base = built_echo_engine(limited, owner_key)
    short = key(limited, overrides=KeyLimits(translate_per_minute=0, max_chars_per_request=10))
    with rest(limited, short) as client:
        assert client.post(f"{base}/translate", json="0123456789").status_code == 200
        over = client.post(f"{base}/translate", json="0123456789x")
        assert over.status_code == 413, over.text
        assert "10" in over.json()["message"]
    with rest(limited, owner_key) as client:
        assert client.post(f"{base}/translate", json="0123456789x" * 10).status_code == 200


def key_with_limit(admin: httpx.Client, translate_per_minute: int) -> dict[str, Any]:
    """An administrator's new key for owner-a, allowed `translate_per_minute` translations."""
    created = admin.post(
        "/admin/api-keys",
        json={
            "owner": "owner-a",
            "scopes": list(ALL_ENGINE_SCOPES),
            "limits": {"translatePerMinute": translate_per_minute},
        },
    )
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    return answer


def test_an_administrators_override_raises_one_keys_limit(limited: RunningApi) -> None:
    admin_key = key(limited, "root", overrides=None)
    assert limited.service.services is not None
    _, admin_plain = limited.run(create_api_key(limited.service.services.db, "root", (ADMIN,)))
    del admin_key
    owner_key = key(limited)
    base = built_echo_engine(limited, owner_key)
    not_near_a_window_end()
    with httpx.Client(base_url=f"{limited.rest_url}/api/v1", headers={"X-API-Key": admin_plain}) as admin:
        created = key_with_limit(admin, 20)
        assert created["limits"] == {"translatePerMinute": 20}
        raised = created["key"]
        with rest(limited, raised) as client:
            answers = [client.post(f"{base}/translate", json="Hi").status_code for _ in range(20)]
            assert answers == [200] * 20, "an override above the setting"
            assert_refused(client.post(f"{base}/translate", json="Hi"))
        assert (
            admin.put(f"/admin/api-keys/{created['id']}/limits", json={"translatePerMinute": -1}).status_code
            == 400
        )

        # The same over gRPC: a key created with its own limit, then lifted.
        admin_stub = admin_pb2_grpc.AdminApiStub(limited.channel)
        as_admin = (("x-api-key", admin_plain),)
        made = admin_stub.CreateApiKey(
            admin_pb2.CreateApiKeyRequest(
                owner="owner-a",
                scopes=list(ALL_ENGINE_SCOPES),
                limits=admin_pb2.ApiKeyLimits(translate_per_minute=1),
            ),
            metadata=as_admin,
        )
        assert made.api_key.limits.translate_per_minute == 1
        with rest(limited, made.key) as client:
            assert client.post(f"{base}/translate", json="Hi").status_code == 200
            assert_refused(client.post(f"{base}/translate", json="Hi"))
            lifted = admin_stub.SetApiKeyLimits(
                admin_pb2.SetApiKeyLimitsRequest(
                    id=made.api_key.id, limits=admin_pb2.ApiKeyLimits(translate_per_minute=0)
                ),
                metadata=as_admin,
            )
            assert lifted.limits.translate_per_minute == 0
            answers = [client.post(f"{base}/translate", json="Hi").status_code for _ in range(10)]
            assert answers == [200] * 10, "0 lifts the limit for the key"
        listed = admin.get("/admin/api-keys", params={"owner": "owner-a"}).json()
        assert {"translatePerMinute": 0} in [k.get("limits") for k in listed]


def test_an_administrators_override_lowers_one_keys_limit_at_once(limited: RunningApi) -> None:
    """Lowered mid-minute, the limit holds at once: the allowance this replica took under the higher
    limit (a twentieth of 200: 10 requests) is not spent past the new one."""
    assert limited.service.services is not None
    _, admin_plain = limited.run(create_api_key(limited.service.services.db, "root", (ADMIN,)))
    base = built_echo_engine(limited, key(limited))
    not_near_a_window_end()
    with httpx.Client(base_url=f"{limited.rest_url}/api/v1", headers={"X-API-Key": admin_plain}) as admin:
        created = key_with_limit(admin, 200)
        with rest(limited, created["key"]) as client:
            assert client.post(f"{base}/translate", json="Hi").status_code == 200
            lowered = admin.put(f"/admin/api-keys/{created['id']}/limits", json={"translatePerMinute": 1})
            assert lowered.status_code == 200, lowered.text
            assert "1 translation requests a minute" in assert_refused(
                client.post(f"{base}/translate", json="Hi")
            )


def test_serval_admin_sets_a_keys_limits(limited: RunningApi) -> None:
    settings = limited.service.settings
    home = ["--home", str(settings.home), "--database-url", settings.resolved_database_url]
    runner = CliRunner()
    made = runner.invoke(
        app,
        [
            "admin",
            "api-key",
            "create",
            "--owner",
            "cli",
            "--limit",
            "translate_per_minute=7",
            "--limit",
            "max-chars-per-request=9",
            *home,
        ],
    )
    assert made.exit_code == 0, made.output
    plaintext = made.output.strip().splitlines()[-1]
    key_id = made.stdout.split()[2]
    assert caller_of(limited, plaintext).limits == KeyLimits(translate_per_minute=7, max_chars_per_request=9)

    changed = runner.invoke(
        app, ["admin", "api-key", "limits", key_id, "--limit", "concurrent_long_polls=0", *home]
    )
    assert changed.exit_code == 0, changed.output
    assert "concurrent_long_polls=0" in changed.output
    time.sleep(limited.service.settings.api.lookup_cache_s + 0.5)  # a replica reuses a checked key that long
    assert caller_of(limited, plaintext).limits == KeyLimits(concurrent_long_polls=0)

    refused = runner.invoke(
        app, ["admin", "api-key", "limits", key_id, "--limit", "max_chars_per_request=0", *home]
    )
    assert refused.exit_code == 1 and "max_chars_per_request" in refused.output
    unknown = runner.invoke(app, ["admin", "api-key", "limits", key_id, "--limit", "speed=3", *home])
    assert unknown.exit_code != 0 and "NAME=N" in unknown.output


def caller_of(api: RunningApi, plaintext: str) -> Caller:
    assert api.service.services is not None
    caller = api.run(api.service.services.lookups.caller(plaintext))
    assert caller is not None
    return caller


def bound_key(api: RunningApi, engine_path: str, per_minute: int) -> str:
    return key(
        api, overrides=KeyLimits(translate_per_minute=per_minute), engine_id=engine_path.rsplit("/", 1)[1]
    )


def test_libretranslate_answers_its_own_429(limited: RunningApi) -> None:
    base = built_echo_engine(limited, key(limited))
    bound = bound_key(limited, base, 1)
    not_near_a_window_end()
    fields = {"q": "Hello.", "source": "en", "target": "sw", "api_key": bound}
    with httpx.Client(base_url=limited.rest_url, timeout=30) as libre:
        first = libre.post("/translate", json=fields)
        assert first.status_code == 200, first.text
        refused = libre.post("/translate", json=fields)
        message = assert_refused(refused)
        assert set(refused.json()) == {"error"}, "LibreTranslate's shape"
        assert "a minute" in message
        assert refused.headers["Access-Control-Allow-Origin"] == "*"


def test_sil_converters_answers_its_own_429(limited: RunningApi) -> None:
    base = built_echo_engine(limited, key(limited))
    bound = bound_key(limited, base, 1)
    not_near_a_window_end()
    body = {"sourceLanguage": "eng_Latn", "targetLanguage": "swh_Latn", "text": "Hello."}
    headers = {"Authorization": f"SIL-NLLB-Auth-Key {bound}"}
    with httpx.Client(base_url=limited.rest_url, headers=headers, timeout=30) as sil:
        first = sil.post("/api/v1/translate/", json=body)
        assert first.status_code == 200, first.text
        refused = sil.post("/api/v1/translate/", json=body)
        assert_refused(refused)
        assert set(refused.json()) == {"error"}, "SIL Converters' shape"


# ---- PostgreSQL: replicas share one budget, a restart resets nothing ----------------------------

postgres_only = pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_URL),
    reason="replicas share a database on PostgreSQL (run with scripts/postgres.sh run …)",
)


@postgres_only
def test_two_replicas_share_one_keys_budget_and_a_restart_does_not_reset_it(
    tmp_path: Path, database_url: str
) -> None:
    a = RunningApi(limited_settings(tmp_path, database_url, "replica-a"))
    b: RunningApi | None = None
    try:
        b = RunningApi(limited_settings(tmp_path, database_url, "replica-b"))
        hostile = key(a)
        base = built_echo_engine(a, key(a))
        not_near_a_window_end(60, 20.0)
        with rest(a, hostile) as on_a, rest(b, hostile) as on_b:
            answers = [
                (on_a if i % 2 else on_b).post(f"{base}/translate", json="Hi")
                for i in range(TRANSLATE_PER_MINUTE)
            ]
            assert [x.status_code for x in answers] == [200] * TRANSLATE_PER_MINUTE
            assert_refused(on_a.post(f"{base}/translate", json="Hi"))
            assert_refused(on_b.post(f"{base}/translate", json="Hi"))
        b.close()
        b = RunningApi(limited_settings(tmp_path, database_url, "replica-b"))
        with rest(b, hostile) as on_b:
            assert_refused(on_b.post(f"{base}/translate", json="Hi"))
        with rest(b, key(b)) as other:
            assert other.post(f"{base}/translate", json="Hi").status_code == 200

        # Long polls: two waiting on A; B refuses the third once A's counts reach it (about a second).
        assert a.service.services is not None
        a.service.services.long_poll_max_s = PARKED_S
        with rest(a, hostile) as client:
            engine, build_id, revision = pending_build(client)
        url = f"/translation/engines/{engine}/builds/{build_id}"
        far = {"min-revision": revision + 1}
        with ThreadPoolExecutor(2) as pool, rest(a, hostile) as on_a, rest(b, hostile) as on_b:
            parked = [pool.submit(on_a.get, url, params=far) for _ in range(CONCURRENT_LONG_POLLS)]
            time.sleep(3.0)
            assert_refused(on_b.get(url, params=far))
            on_a.post(f"/translation/engines/{engine}/current-build/cancel")
            for poll in parked:
                assert poll.result(timeout=PARKED_S + 10).status_code in (200, 408)
    finally:
        if b is not None:
            b.close()
        a.close()
