"""Two API replicas on one PostgreSQL database: a build's job reports to replica A, and clients
waiting on replica B (long polls, `WatchBuild`) wake through LISTEN/NOTIFY.

B's long polls are given `PARKED_MAX_S`, well past `WOKE_WITHIN_S`: a waiter that returns sooner
was woken by a notification, not by its own timeout and re-read.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import grpc
import httpx
import pytest
from sqlalchemy.engine import make_url

from serval.translation.v1 import engine_pb2, platform_pb2
from serval_api.db.notifications import application_name
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_platform_api import as_job, job_stub
from tests.api.test_watch_build import engine_stub
from tests.helpers import TEST_DATABASE_URL, wait_until

pytestmark = pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_URL),
    reason="replicas share changes through PostgreSQL LISTEN/NOTIFY; SQLite serves one replica "
    "(run with scripts/postgres.sh run …)",
)

T = TypeVar("T")

# Far apart, so that a loaded machine's slow wake-up is never taken for a timeout, nor the reverse.
PARKED_MAX_S = 40.0
WOKE_WITHIN_S = 20.0
SETTLE_S = 0.3  # long enough for a watch on B to read the build and park


class Replicas:
    def __init__(self, a: RunningApi, b: RunningApi) -> None:
        self.a, self.b = a, b
        self.client_a, self.client_b = a.client(), b.client()
        self.client_b.timeout = httpx.Timeout(PARKED_MAX_S + 10)  # B's polls park up to PARKED_MAX_S
        self.job = job_stub(a)

    def report(self, method: str, request: Any) -> None:
        """Report as the build's job, to replica A (the job token is in A's launcher)."""
        getattr(self.job, method)(request, metadata=as_job(self.a))


@pytest.fixture
def replicas(tmp_path: Path, database_url: str) -> Iterator[Replicas]:
    def settings(name: str) -> Settings:
        return Settings(
            home=tmp_path,  # one shared model store, as replicas behind one service would have
            database_url=database_url,
            api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, instance_id=name),
        )

    a = RunningApi(settings("replica-a"))
    try:
        b = RunningApi(settings("replica-b"))
        try:
            assert b.service.services is not None
            b.service.services.long_poll_max_s = PARKED_MAX_S
            pair = Replicas(a, b)
            try:
                yield pair
            finally:
                pair.client_a.close()
                pair.client_b.close()
        finally:
            b.close()
    finally:
        a.close()


def parked(pool: ThreadPoolExecutor, on: RunningApi, call: Callable[[], T]) -> Future[T]:
    """Start `call`, a long poll to replica `on`, and return once it waits there (its gauge of
    waiting polls has grown); fails if it answered without waiting."""
    before = on.long_polls_waiting()
    future = pool.submit(call)
    wait_until(lambda: future.done() or on.long_polls_waiting() > before, 60, "the poll waiting")
    assert not future.done(), f"returned without waiting: {future.result()}"
    return future


def woken(future: Future[T], since: float) -> T:
    result = future.result(timeout=PARKED_MAX_S + 12)
    elapsed = time.monotonic() - since
    assert elapsed < WOKE_WITHIN_S, f"woke after {elapsed:.1f} s: by its timeout, not a notification"
    return result


def start_build(replicas: Replicas) -> tuple[str, str]:
    engine = create_engine(replicas.client_a)
    base = f"/translation/engines/{engine['id']}"
    build = replicas.client_a.post(f"{base}/builds", json={})
    assert build.status_code == 201, build.text
    return base, build.json()["id"]


def test_long_polls_on_b_wake_on_changes_reported_to_a(replicas: Replicas) -> None:
    base, build_id = start_build(replicas)
    build_url = f"{base}/builds/{build_id}"
    client_b = replicas.client_b
    assert client_b.get(build_url).json()["state"] == "Pending"

    with ThreadPoolExecutor(1) as pool:
        waiting = parked(pool, replicas.b, lambda: client_b.get(build_url, params={"min-revision": 2}))
        since = time.monotonic()
        replicas.report("BuildStarted", platform_pb2.BuildStartedRequest(build_id=build_id))
        started = woken(waiting, since)
        assert (started.status_code, started.json()["state"], started.json()["revision"]) == (
            200,
            "Active",
            2,
        )

        waiting = parked(pool, replicas.b, lambda: client_b.get(build_url, params={"min-revision": 3}))
        since = time.monotonic()
        replicas.report(
            "UpdateBuildStatus",
            platform_pb2.UpdateBuildStatusRequest(
                build_id=build_id, step=5, progress=0.5, message="training"
            ),
        )
        progress = woken(waiting, since).json()
        assert (progress["revision"], progress["step"], progress["progress"], progress["message"]) == (
            3,
            5,
            0.5,
            "training",
        )

        waiting = parked(
            pool, replicas.b, lambda: client_b.get(f"{base}/current-build", params={"min-revision": 4})
        )
        since = time.monotonic()
        replicas.report(
            "BuildCompleted",
            platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=7, confidence=42.5),
        )
        done = woken(waiting, since)
    assert (done.status_code, done.json()["id"], done.json()["state"], done.json()["revision"]) == (
        200,
        build_id,
        "Completed",
        4,
    )
    assert client_b.get(base).json()["modelRevision"] == 1


def test_watch_build_on_b_sees_every_state(replicas: Replicas) -> None:
    base, build_id = start_build(replicas)
    engine_id = base.rsplit("/", 1)[1]
    stream = engine_stub(replicas.b).WatchBuild(
        engine_pb2.WatchBuildRequest(engine_id=engine_id, build_id=build_id),
        metadata=(("x-api-key", replicas.b.api_key()),),
        timeout=4 * PARKED_MAX_S,
    )
    first = next(stream)
    assert (first.build_id, first.revision, first.state) == (build_id, 1, "Pending")

    def next_after(method: str, request: Any) -> engine_pb2.BuildUpdate:
        since = time.monotonic()
        replicas.report(method, request)
        update: engine_pb2.BuildUpdate = next(stream)
        elapsed = time.monotonic() - since
        assert elapsed < WOKE_WITHIN_S, f"{update.state} came after {elapsed:.1f} s, not by a notification"
        return update

    # B's watch re-reads on its own only every PARKED_MAX_S: give it time to park first.
    time.sleep(SETTLE_S)
    active = next_after("BuildStarted", platform_pb2.BuildStartedRequest(build_id=build_id))
    assert (active.revision, active.state) == (2, "Active")
    time.sleep(SETTLE_S)
    progress = next_after(
        "UpdateBuildStatus",
        platform_pb2.UpdateBuildStatusRequest(build_id=build_id, step=3, progress=0.25, message="training"),
    )
    assert (progress.revision, progress.step, progress.progress, progress.message) == (3, 3, 0.25, "training")
    time.sleep(SETTLE_S)
    done = next_after(
        "BuildCompleted", platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=2, confidence=50)
    )
    assert (done.revision, done.state, done.engine_model_revision) == (4, "Completed", 1)
    with pytest.raises(StopIteration):
        next(stream)
    assert stream.code() == grpc.StatusCode.OK


def test_b_recovers_after_its_listener_connection_is_killed(database_url: str, replicas: Replicas) -> None:
    base, build_id = start_build(replicas)
    build_url = f"{base}/builds/{build_id}"
    client_b = replicas.client_b
    listener = application_name("replica-b")

    with ThreadPoolExecutor(1) as pool:
        # Killed while a poll is parked, and the change made at once, most likely before B listens
        # again: B's reconnect must wake the poll, which then reads the change.
        waiting = parked(pool, replicas.b, lambda: client_b.get(build_url, params={"min-revision": 2}))
        since = time.monotonic()
        assert terminate_backends(database_url, listener) == 1
        replicas.report("BuildStarted", platform_pb2.BuildStartedRequest(build_id=build_id))
        started = woken(waiting, since).json()
        assert (started["state"], started["revision"]) == ("Active", 2)

        # Listening again: a later change reaches B by a notification.
        wait_for_listener(database_url, listener)
        waiting = parked(pool, replicas.b, lambda: client_b.get(build_url, params={"min-revision": 3}))
        since = time.monotonic()
        replicas.report(
            "BuildCompleted",
            platform_pb2.BuildCompletedRequest(build_id=build_id, corpus_size=1, confidence=1),
        )
        done = woken(waiting, since).json()
    assert (done["state"], done["revision"]) == ("Completed", 3)
    # A's listener was never touched.
    assert count_backends(database_url, application_name("replica-a")) == 1


def terminate_backends(database_url: str, name: str) -> int:
    rows = query(
        database_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = $1 AND datname = current_database()",
        name,
    )
    return sum(1 for (killed,) in rows if killed)


def count_backends(database_url: str, name: str) -> int:
    rows = query(
        database_url,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
        name,
    )
    return int(rows[0][0])


def wait_for_listener(database_url: str, name: str, timeout_s: float = WOKE_WITHIN_S) -> None:
    deadline = time.monotonic() + timeout_s
    while count_backends(database_url, name) != 1:
        assert time.monotonic() < deadline, f"{name} did not connect again within {timeout_s} s"
        time.sleep(0.05)


def query(database_url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)

    async def fetch() -> list[tuple[Any, ...]]:
        connection = await asyncpg.connect(dsn)
        try:
            return [tuple(row) for row in await connection.fetch(sql, *args)]
        finally:
            await connection.close()

    return asyncio.run(fetch())
