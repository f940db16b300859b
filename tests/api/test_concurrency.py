"""Concurrent changes to one build or engine: none is lost, every change adds exactly one revision,
and long polls all wake (or time out) on time. Runs on SQLite and, under `make test`, PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pytest

from serval.translation.v1 import platform_pb2
from serval_api.db.database import Database
from serval_api.db.models import BuildRow, EngineRow
from serval_api.service import build_transitions, platform
from tests.api.conftest import LONG_POLL_MAX_S, RunningApi, create_engine
from tests.api.test_platform_api import as_job, job_stub
from tests.helpers import wait_until

T = TypeVar("T")

UPDATES = 20
POLLERS = 20


def all_at_once(calls: list[Callable[[], T]]) -> list[T]:
    """Run every call on its own thread, released together."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], T]) -> T:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(timeout=60) for f in [pool.submit(run, c) for c in calls]]


def record_applied_revisions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The build revision each applied job report produced (reports a finished build ignores are absent)."""
    revisions: list[int] = []

    async def recording(services: Any, build_id: str, change: Any) -> BuildRow | None:
        build = await build_transitions.apply_job_change(services, build_id, change)
        if build is not None:
            revisions.append(build.revision)
        return build

    monkeypatch.setattr(platform, "apply_job_change", recording)
    return revisions


def start_build(client: httpx.Client) -> tuple[str, str]:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    build = client.post(f"{base}/builds", json={})
    assert build.status_code == 201, build.text
    return base, build.json()["id"]


def test_status_updates_racing_a_cancel_lose_nothing(
    api: RunningApi, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied = record_applied_revisions(monkeypatch)
    base, build_id = start_build(client)
    job, metadata = job_stub(api), as_job(api)

    def update(step: int) -> Callable[[], object]:
        request = platform_pb2.UpdateBuildStatusRequest(build_id=build_id, step=step, progress=step / 100)
        return lambda: job.UpdateBuildStatus(request, metadata=metadata)

    all_at_once([update(step) for step in range(1, UPDATES + 1)])
    after_updates = client.get(f"{base}/builds/{build_id}").json()
    assert after_updates["revision"] == 1 + UPDATES
    assert sorted(applied) == list(range(2, UPDATES + 2))

    applied.clear()
    results = all_at_once(
        [update(step) for step in range(UPDATES + 1, 2 * UPDATES + 1)]
        + [lambda: client.post(f"{base}/current-build/cancel")]
    )
    canceled = results[-1]
    assert isinstance(canceled, httpx.Response) and canceled.status_code == 200, canceled
    final = client.get(f"{base}/builds/{build_id}").json()
    assert final["state"] == "Canceled"
    assert final["revision"] == canceled.json()["revision"] == 1 + UPDATES + len(applied) + 1
    assert sorted([*applied, final["revision"]]) == list(range(UPDATES + 2, final["revision"] + 1))
    if applied:
        assert final["step"] > UPDATES, "the last applied update's progress is kept"
    assert client.get(base).json()["isBuilding"] is False


def test_completion_racing_a_cancel_has_one_outcome(api: RunningApi, client: httpx.Client) -> None:
    base, build_id = start_build(client)
    job, metadata = job_stub(api), as_job(api)
    completed = platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=3, confidence=50.0)
    all_at_once(
        [
            lambda: job.BuildCompleted(completed, metadata=metadata),
            lambda: client.post(f"{base}/current-build/cancel"),
        ]
    )
    build = client.get(f"{base}/builds/{build_id}").json()
    engine = client.get(base).json()
    assert build["revision"] == 2
    assert build["state"] in ("Completed", "Canceled")
    assert engine["modelRevision"] == (1 if build["state"] == "Completed" else 0)
    assert engine["isBuilding"] is False


def test_many_long_polls_all_wake_on_one_change(api: RunningApi, client: httpx.Client) -> None:
    api.wake_polls_only()
    base, build_id = start_build(client)
    url = f"{base}/builds/{build_id}"
    with ThreadPoolExecutor(POLLERS) as pool:
        polls = [pool.submit(client.get, url, params={"min-revision": 2}) for _ in range(POLLERS)]
        wait_until(lambda: api.long_polls_waiting() == POLLERS, 60, "every poll waiting")
        job_stub(api).BuildStarted(platform_pb2.BuildStartedRequest(build_id=build_id), metadata=as_job(api))
        answers = [p.result(timeout=60) for p in polls]
    assert [a.status_code for a in answers] == [200] * POLLERS
    assert {(a.json()["revision"], a.json()["state"]) for a in answers} == {(2, "Active")}
    assert api.long_polls_waiting() == 0


def test_long_polls_on_an_unchanging_build_time_out_with_408(client: httpx.Client) -> None:
    base, build_id = start_build(client)
    url = f"{base}/builds/{build_id}"
    began = time.monotonic()
    answers = all_at_once(
        [lambda: client.get(url, params={"min-revision": 2}) for _ in range(POLLERS)]
        + [lambda: client.get(f"{base}/current-build", params={"min-revision": 2})]
    )
    elapsed = time.monotonic() - began
    assert [a.status_code for a in answers] == [408] * (POLLERS + 1)
    assert LONG_POLL_MAX_S <= elapsed < LONG_POLL_MAX_S + 20, "the polls end at their limit, not later"


def test_concurrent_starts_on_one_engine_give_one_201_and_one_409(client: httpx.Client) -> None:
    engines = [create_engine(client)["id"] for _ in range(4)]
    calls = [
        (lambda e=engine_id: client.post(f"/translation/engines/{e}/builds", json={}))
        for engine_id in engines
        for _ in range(2)
    ]
    answers = all_at_once(calls)
    for i, engine_id in enumerate(engines):
        assert sorted(a.status_code for a in answers[2 * i : 2 * i + 2]) == [201, 409], engine_id
        assert len(client.get(f"/translation/engines/{engine_id}/builds").json()) == 1


def test_locked_read_modify_write_transactions_take_turns(database_url: str) -> None:
    """What the service relies on: a transaction that read an engine under lock (FOR UPDATE on
    PostgreSQL, BEGIN IMMEDIATE on SQLite) writes it before any other transaction reads it."""

    async def scenario() -> int:
        db = Database(database_url)
        try:
            await db.migrate()
            async with db.session() as s:
                s.add(
                    EngineRow(
                        id="e",
                        owner="o",
                        type="nmt",
                        source_language="en",
                        target_language="sw",
                        source_code="eng_Latn",
                        target_code="swh_Latn",
                    )
                )

            async def increment() -> None:
                async with db.session() as s:
                    engine = await s.get(EngineRow, "e", with_for_update=True)
                    assert engine is not None
                    seen = engine.model_revision
                    await asyncio.sleep(0.05)
                    engine.model_revision = seen + 1

            await asyncio.gather(*(increment() for _ in range(5)))
            async with db.session() as s:
                engine = await s.get(EngineRow, "e")
                assert engine is not None
                return engine.model_revision
        finally:
            await db.close()

    assert asyncio.run(scenario()) == 5
