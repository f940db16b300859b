"""The builds feed (`GET translation/builds`, `GET translation/builds/next-finished`) and the
build body Serval's generated client requires."""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from serval.translation.v1 import platform_pb2
from serval_api.auth import ALL_SCOPES, READ_ENGINES, UPDATE_ENGINES
from serval_api.db.models import BuildRow
from serval_api.service.changes import owner_builds_key
from serval_api.service.deployment import service_version
from tests.api.conftest import LONG_POLL_MAX_S, RunningApi, create_engine, wait_for_build
from tests.api.test_platform_api import as_job, job_stub
from tests.api.test_replicas import PARKED_MAX_S, WOKE_WITHIN_S, Replicas, parked, replicas, woken
from tests.api.test_word_alignment import WA, wa_engine
from tests.helpers import TEST_DATABASE_URL

__all__ = ["replicas"]  # the fixture, for test_next_finished_wakes_across_replicas

FEED = "/translation/builds"
NEXT = "/translation/builds/next-finished"
SERVAL_DATE = "%Y-%m-%d %H:%M:%SZ"
"""How Serval's client writes `created-after` and `finished-after`."""
ISO_OFFSET = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def stamp(value: str) -> datetime:
    assert ISO_OFFSET.match(value), f"not ISO-8601 with an offset: {value}"
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def assert_build_body(build: dict[str, Any]) -> None:
    """Every property Serval's client requires (`Required.Always`), present and of its type."""
    for key in ("id", "url", "state"):
        assert isinstance(build[key], str) and build[key], key
    assert isinstance(build["revision"], int) and isinstance(build["step"], int)
    assert isinstance(build["engine"]["id"], str) and build["url"].startswith(build["engine"]["url"])
    assert build["state"] in ("Pending", "Active", "Completed", "Faulted", "Canceled")
    data = build["executionData"]
    assert isinstance(data["trainCount"], int) and isinstance(data["pretranslateCount"], int)
    assert isinstance(data["warnings"], list)
    assert isinstance(build["canDenormalizeQuotes"], bool)
    assert build["deploymentVersion"] == service_version()
    for key in ("dateCreated", "dateStarted", "dateFinished", "dateCompleted"):
        if key in build:
            stamp(build[key])
    assert build.get("dateCompleted") == build.get("dateFinished")
    assert build.get("percentCompleted") == build.get("progress")
    for absent in ("analysis", "targetQuoteConvention"):
        assert build.get(absent, "") is not None, f"{absent} is null rather than omitted"


def start(client: httpx.Client, engine: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/translation/engines/{engine['id']}/builds", json={})
    assert response.status_code == 201, response.text
    build: dict[str, Any] = response.json()
    return build


def complete(api: RunningApi, build_id: str) -> None:
    job_stub(api).BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=3, confidence=40),
        metadata=as_job(api),
    )


def set_columns(api: RunningApi, build_id: str, **values: Any) -> None:
    assert api.service.services is not None
    db = api.service.services.db

    async def write() -> None:
        async with db.session() as s:
            await s.execute(update(BuildRow).where(BuildRow.id == build_id).values(**values))

    api.run(write())


def serval_date(value: datetime) -> str:
    return value.astimezone(UTC).strftime(SERVAL_DATE)


# ---- the build body -----------------------------------------------------------------------


def test_a_build_carries_every_required_property_through_its_life(
    api: RunningApi, client: httpx.Client
) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    created = start(client, engine)
    assert_build_body(created)
    assert (created["state"], created["executionData"]["trainCount"], created["canDenormalizeQuotes"]) == (
        "Pending",
        0,
        False,
    )
    assert "percentCompleted" not in created and "dateCompleted" not in created
    job = job_stub(api)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=created["id"]), metadata=as_job(api))
    job.UpdateBuildStatus(
        platform_pb2.UpdateBuildStatusRequest(
            build_id=created["id"], step=4, progress=0.5, message="training"
        ),
        metadata=as_job(api),
    )
    running = client.get(f"{base}/builds/{created['id']}").json()
    assert_build_body(running)
    assert (running["state"], running["step"], running["percentCompleted"]) == ("Active", 4, 0.5)
    complete(api, created["id"])
    done = client.get(f"{base}/builds/{created['id']}").json()
    assert_build_body(done)
    assert (done["state"], done["percentCompleted"]) == ("Completed", 1.0)
    assert stamp(done["dateCompleted"]) >= stamp(done["dateCreated"])


def test_quote_analysis_and_missing_execution_data(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client, "echo")
    build = wait_for_build(client, start(client, engine))
    url = f"/translation/engines/{engine['id']}/builds/{build['id']}"
    analysis = [
        {
            "parallelCorpusRef": "pc1",
            "sourceQuoteConvention": "standard_english",
            "targetQuoteConvention": "standard_swahili",
            "canDenormalizeQuotes": True,
        },
        {"parallelCorpusRef": "pc2", "targetQuoteConvention": "", "canDenormalizeQuotes": False},
    ]
    set_columns(
        api, build["id"], analysis=analysis, target_quote_convention="standard_swahili", execution_data=None
    )
    body = client.get(url).json()
    assert_build_body(body)
    assert body["analysis"] == [
        analysis[0],
        {"parallelCorpusRef": "pc2", "targetQuoteConvention": "", "canDenormalizeQuotes": False},
    ]
    assert (body["targetQuoteConvention"], body["canDenormalizeQuotes"]) == ("standard_swahili", True)
    assert body["executionData"] == {"trainCount": 0, "pretranslateCount": 0, "warnings": []}

    set_columns(
        api, build["id"], target_quote_convention="", execution_data={"trainCount": 7, "warnings": None}
    )
    body = client.get(url).json()
    assert_build_body(body)
    assert body["canDenormalizeQuotes"] is False
    assert body["executionData"] == {"trainCount": 7, "pretranslateCount": 0, "warnings": []}


# ---- GET translation/builds?created-after ----------------------------------------------------


def test_builds_created_after_are_the_callers_oldest_first(api: RunningApi, client: httpx.Client) -> None:
    first_engine, second_engine = create_engine(client, "echo"), create_engine(client, "echo")
    made = [
        wait_for_build(client, start(client, engine))
        for engine in (first_engine, second_engine, first_engine)
    ]
    with api.client("owner-b") as other:
        theirs = start(other, create_engine(other, "echo"))
        assert [b["id"] for b in other.get(FEED).json()] == [theirs["id"]]

    everything = client.get(FEED)
    assert everything.status_code == 200, everything.text
    assert [b["id"] for b in everything.json()] == [b["id"] for b in made]
    for build in everything.json():
        assert_build_body(build)

    def after(value: str) -> list[str]:
        answer = client.get(FEED, params={"created-after": value})
        assert answer.status_code == 200, answer.text
        return [b["id"] for b in answer.json()]

    first_created = stamp(made[0]["dateCreated"])
    assert after(made[0]["dateCreated"]) == [b["id"] for b in made[1:]]
    plus_two = first_created.astimezone(timezone(timedelta(hours=2))).isoformat()
    assert after(plus_two) == [b["id"] for b in made[1:]]
    assert after(serval_date(first_created - timedelta(seconds=1))) == [b["id"] for b in made]
    assert after(serval_date(first_created + timedelta(days=1))) == []
    assert after("2000-01-01") == [b["id"] for b in made]
    assert after(made[2]["dateCreated"]) == []


@pytest.mark.parametrize("bad", ["yesterday", "2024-13-01 00:00:00Z", "", "0001-01-01T00:00:00+01:00"])
def test_a_bad_date_answers_400(client: httpx.Client, bad: str) -> None:
    """`created-after` is a date; `finished-after` is a build id (Serval's) or a date (ours), so only
    what is shaped like a date and is none answers 400 there (`test_serval_integration.py` has the
    ids, and what Serval does with an id it does not find)."""
    answer = client.get(FEED, params={"created-after": bad})
    assert answer.status_code == 400, answer.text
    assert "created-after" in answer.json()["message"]
    if bad[:1].isdigit():
        answer = client.get(NEXT, params={"finished-after": bad})
        assert answer.status_code == 400, answer.text
        assert "finished-after" in answer.json()["message"]


# ---- GET translation/builds/next-finished -----------------------------------------------------


def test_next_finished_returns_the_earliest_build_finished_after(
    api: RunningApi, client: httpx.Client
) -> None:
    before = serval_date(datetime.now(UTC) - timedelta(seconds=2))
    engine = create_engine(client, "echo")
    first = wait_for_build(client, start(client, engine))
    second = wait_for_build(client, start(client, engine))
    answer = client.get(NEXT, params={"finished-after": before})
    assert answer.status_code == 200, answer.text
    assert_build_body(answer.json())
    assert (answer.json()["id"], answer.json()["state"]) == (first["id"], "Completed")
    following = client.get(NEXT, params={"finished-after": answer.json()["dateFinished"]})
    assert following.status_code == 200 and following.json()["id"] == second["id"]

    since = time.monotonic()
    nothing = client.get(NEXT, params={"finished-after": second["dateFinished"]})
    waited = time.monotonic() - since
    assert nothing.status_code == 408, nothing.text
    assert "poll again" in nothing.json()["message"]
    assert LONG_POLL_MAX_S * 0.9 <= waited < LONG_POLL_MAX_S + 20, "the poll ends at its limit, not later"


def test_a_parked_poll_wakes_when_a_build_finishes(api: RunningApi, client: httpx.Client) -> None:
    assert api.service.services is not None
    api.service.services.long_poll_max_s = PARKED_MAX_S
    engine = create_engine(client)
    build = start(client, engine)
    after = serval_date(datetime.now(UTC) - timedelta(seconds=1))
    with ThreadPoolExecutor(1) as pool:
        waiting = parked(pool, api, lambda: client.get(NEXT, params={"finished-after": after}))
        since = time.monotonic()
        complete(api, build["id"])
        answer = woken(waiting, since)
    assert answer.status_code == 200, answer.text
    assert_build_body(answer.json())
    assert (answer.json()["id"], answer.json()["state"], answer.json()["revision"]) == (
        build["id"],
        "Completed",
        2,
    )


def test_another_owners_builds_never_answer(api: RunningApi, client: httpx.Client) -> None:
    after = serval_date(datetime.now(UTC) - timedelta(seconds=1))
    with api.client("owner-b") as other, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(lambda: client.get(NEXT, params={"finished-after": after}))
        time.sleep(0.3)
        start(other, create_engine(other, "echo"))
        assert waiting.result(timeout=LONG_POLL_MAX_S + 5).status_code == 408
        assert client.get(FEED).json() == []


def test_word_alignment_builds_are_not_in_the_translation_feed(api: RunningApi) -> None:
    """Serval's feed reads translation builds only (it has no word-alignment feed): a word-alignment
    build's URL answers 404 as a translation build."""
    before = serval_date(datetime.now(UTC) - timedelta(seconds=2))
    with api.client(scopes=ALL_SCOPES) as owner:
        aligner = wa_engine(owner, type="EchoWordAlignment")
        started = owner.post(f"{WA}/{aligner['id']}/builds", json={})
        assert started.status_code == 201, started.text
        assert wait_for_build(owner, started.json(), WA)["state"] == "Completed"
        assert owner.get(FEED).json() == []
        assert (
            owner.get(f"/translation/engines/{aligner['id']}/builds/{started.json()['id']}").status_code
            == 404
        )

        translation = wait_for_build(owner, start(owner, create_engine(owner, "echo")))
        assert [b["id"] for b in owner.get(FEED).json()] == [translation["id"]]
        answer = owner.get(NEXT, params={"finished-after": before})
        assert answer.status_code == 200 and answer.json()["id"] == translation["id"]


def test_credentials_and_scope_are_checked_before_any_wait(api: RunningApi) -> None:
    assert api.service.services is not None
    services = api.service.services
    services.long_poll_max_s = PARKED_MAX_S
    params = {"finished-after": "2000-01-01 00:00:00Z"}
    with httpx.Client(base_url=f"{api.rest_url}/api/v1", timeout=60) as anonymous:
        since = time.monotonic()
        assert anonymous.get(NEXT, params=params).status_code == 401
        assert anonymous.get(FEED).status_code == 401
    with api.client(scopes=(UPDATE_ENGINES,)) as unscoped:
        assert unscoped.get(NEXT, params=params).status_code == 403
        assert unscoped.get(NEXT, params={"finished-after": "2024-13-01"}).status_code == 403
        assert unscoped.get(FEED).status_code == 403
    with api.client(scopes=(READ_ENGINES,)) as reader:
        assert reader.get(NEXT, params={"finished-after": "2024-13-01"}).status_code == 400
        assert reader.get(FEED).status_code == 200
    assert time.monotonic() - since < PARKED_MAX_S / 2, "a refused request waited"
    assert owner_builds_key("owner-a") not in services.changes._events


def test_the_openapi_document_describes_the_feed(api: RunningApi) -> None:
    schema = httpx.get(f"{api.rest_url}/openapi.json", timeout=10)
    assert schema.status_code == 200
    listing = schema.json()["paths"]["/api/v1/translation/builds"]["get"]
    assert [p["name"] for p in listing["parameters"] if p["in"] == "query"] == ["created-after"]
    operation = schema.json()["paths"]["/api/v1/translation/builds/next-finished"]["get"]
    assert {"200", "400", "401", "403", "408"} <= set(operation["responses"])
    assert [p["name"] for p in operation["parameters"] if p["in"] == "query"] == ["finished-after"]


# ---- two replicas on one PostgreSQL database ----------------------------------------------------


@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_URL),
    reason="replicas share changes through PostgreSQL LISTEN/NOTIFY (run with scripts/postgres.sh run …)",
)
def test_next_finished_wakes_across_replicas(replicas: Replicas) -> None:
    """A polls; the build finishes through B, by its job's report and by a client's cancel."""
    a, b = replicas.a, replicas.b
    assert a.service.services is not None
    a.service.services.long_poll_max_s = PARKED_MAX_S
    engine = create_engine(replicas.client_a)
    build = start(replicas.client_a, engine)
    after = serval_date(datetime.now(UTC) - timedelta(seconds=1))

    def poll(finished_after: str) -> httpx.Response:
        return replicas.client_a.get(NEXT, params={"finished-after": finished_after})

    with ThreadPoolExecutor(1) as pool:
        waiting = parked(pool, a, lambda: poll(after))
        since = time.monotonic()
        job_stub(b).BuildCompleted(
            platform_pb2.BuildCompletedRequest(build_id=build["id"], corpus_size=1, confidence=1),
            metadata=as_job(a),
        )
        done = woken(waiting, since)
        assert done.status_code == 200, done.text
        assert_build_body(done.json())
        assert (done.json()["id"], done.json()["state"]) == (build["id"], "Completed")

        second = start(replicas.client_b, engine)
        waiting = parked(pool, a, lambda: poll(done.json()["dateFinished"]))
        since = time.monotonic()
        assert (
            replicas.client_b.post(f"/translation/engines/{engine['id']}/current-build/cancel").status_code
            == 200
        )
        canceled = woken(waiting, since)
    assert canceled.status_code == 200, canceled.text
    assert (canceled.json()["id"], canceled.json()["state"]) == (second["id"], "Canceled")
    assert [x["id"] for x in replicas.client_b.get(FEED).json()] == [build["id"], second["id"]]
    assert WOKE_WITHIN_S < PARKED_MAX_S
