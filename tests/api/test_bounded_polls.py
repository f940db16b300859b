"""Hostile polling costs the API service no memory that outlives the poll: long polls and
WatchBuild register a wake-up only for a caller's own entity, and the last waiter to leave a key
removes it. A start refused with 409 reads no corpus, and file downloads stream."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES, READ_ENGINES, Caller
from serval_api.errors import NotFound, PermissionDenied, Timeout
from serval_api.service import Services, builds, builds_feed
from serval_api.service.changes import build_key
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.file_rows import set_chunks

POLLS = 1000
READER = frozenset({READ_ENGINES})


def services_of(api: RunningApi) -> Services:
    assert api.service.services is not None
    return api.service.services


def started_build(client: httpx.Client) -> tuple[str, str]:
    engine = create_engine(client)
    response = client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []})
    assert response.status_code == 201, response.text
    return engine["id"], response.json()["id"]


def test_polls_on_unknown_and_foreign_ids_register_nothing(api: RunningApi) -> None:
    services = services_of(api)
    with api.client("owner-b") as other:
        foreign_engine, foreign_build = started_build(other)
    with api.client() as client:
        own_engine, _ = started_build(client)
    me = Caller("owner-a", READER)

    async def polls() -> list[BaseException | object]:
        calls = []
        for i in range(POLLS):
            unknown = f"b{i}-{secrets.token_hex(4)}"
            calls += [
                builds.get_build(services, me, own_engine, unknown, min_revision=99),
                builds.get_build(services, me, foreign_engine, foreign_build, min_revision=99),
                builds.current_build(services, me, f"e{i}-{secrets.token_hex(4)}", min_revision=99),
            ]
        return await asyncio.gather(*calls, return_exceptions=True)

    answers = api.run(polls())
    assert len(answers) == 3 * POLLS
    # Unknown ids: 404; another owner's engine: 403 (Serval's `CheckOwnerAsync`).
    assert all(isinstance(a, PermissionDenied if i % 3 == 1 else NotFound) for i, a in enumerate(answers))
    assert services.changes.watched_keys() == 0


def test_waits_on_distinct_keys_leave_the_map_empty_when_they_end(api: RunningApi) -> None:
    """Each owner's feed poll waits on its own key; cancelled, every entry goes."""
    services = services_of(api)
    # Longer than registering POLLS waits takes on a busy machine: only cancellations end them.
    services.long_poll_max_s = 600
    after = "2000-01-01 00:00:00Z"

    async def polls() -> tuple[int, list[BaseException | object]]:
        waits = [
            asyncio.create_task(builds_feed.next_finished(services, Caller(f"owner-{i}", READER), after))
            for i in range(POLLS)
        ]
        while services.changes.watched_keys() < POLLS:
            await asyncio.sleep(0.01)
        waiting = services.changes.watched_keys()
        for task in waits[::2]:
            task.cancel()
        await asyncio.wait(waits[::2])
        for task in waits[1::2]:
            task.cancel()
        return waiting, await asyncio.gather(*waits, return_exceptions=True)

    # a bound against a hang, not a speed
    waiting, answers = asyncio.run_coroutine_threadsafe(polls(), api.loop).result(timeout=300)
    assert waiting == POLLS
    assert all(isinstance(a, asyncio.CancelledError) for a in answers)
    assert services.changes.watched_keys() == 0


def test_waits_that_time_out_leave_the_map_empty(api: RunningApi) -> None:
    services = services_of(api)
    services.long_poll_max_s = 1
    after = "2000-01-01 00:00:00Z"

    async def polls() -> list[BaseException | object]:
        calls = [builds_feed.next_finished(services, Caller(f"owner-{i}", READER), after) for i in range(50)]
        return await asyncio.gather(*calls, return_exceptions=True)

    answers = asyncio.run_coroutine_threadsafe(polls(), api.loop).result(timeout=300)
    assert all(isinstance(a, Timeout) for a in answers), answers
    assert services.changes.watched_keys() == 0


def test_many_waiters_on_one_key_share_one_entry_until_the_last_leaves(api: RunningApi) -> None:
    services = services_of(api)
    # Longer than every wait below: only cancellations end these polls, however slow the machine.
    services.long_poll_max_s = 600
    with api.client() as client:
        engine_id, build_id = started_build(client)
    me = Caller("owner-a", READER)

    async def polls() -> tuple[list[int], list[BaseException | object]]:
        key = build_key(build_id)
        waits = [
            asyncio.create_task(builds.get_build(services, me, engine_id, build_id, min_revision=2))
            for _ in range(200)
        ]

        async def all_waiting() -> int:
            while services.changes.waiters(key) < len(waits):
                await asyncio.sleep(0.01)
            return services.changes.watched_keys()

        counts = [await all_waiting()]
        services.changes.notify(key)
        counts.append(await all_waiting())
        for task in waits[:100]:
            task.cancel()
        await asyncio.wait(waits[:100])
        counts.append(services.changes.watched_keys())
        counts.append(services.changes.waiters(key))
        for task in waits[100:]:
            task.cancel()
        return counts, await asyncio.gather(*waits, return_exceptions=True)

    # a bound against a hang, not a speed
    counts, answers = asyncio.run_coroutine_threadsafe(polls(), api.loop).result(timeout=120)
    assert counts == [1, 1, 1, 100], "woken waiters watch again; half of them leaving keeps the entry"
    assert all(isinstance(a, asyncio.CancelledError) for a in answers)
    assert services.changes.watched_keys() == 0, "the last waiter to leave removes the entry"


def test_watch_build_on_foreign_ids_and_abandoned_watches_leave_nothing(api: RunningApi) -> None:
    services = services_of(api)
    # Longer than every wait below: only the clients' cancellations can remove the watches.
    services.long_poll_max_s = 600
    with api.client("owner-b") as other:
        foreign_engine, foreign_build = started_build(other)
    with api.client() as client:
        own_engine, own_build = started_build(client)
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    metadata = (("x-api-key", api.api_key()),)
    for i in range(300):
        for engine_id, build_id in (
            (foreign_engine, foreign_build),
            (own_engine, f"nope-{i}"),
            (f"nope-{i}", ""),
        ):
            stream = stub.WatchBuild(
                engine_pb2.WatchBuildRequest(engine_id=engine_id, build_id=build_id), metadata=metadata
            )
            with pytest.raises(grpc.RpcError) as refused:
                list(stream)
            foreign = engine_id == foreign_engine
            assert refused.value.code() == (
                grpc.StatusCode.PERMISSION_DENIED if foreign else grpc.StatusCode.NOT_FOUND
            )
    assert services.changes.watched_keys() == 0

    watches = [
        stub.WatchBuild(
            engine_pb2.WatchBuildRequest(engine_id=own_engine, build_id=own_build), metadata=metadata
        )
        for _ in range(20)
    ]
    for stream in watches:
        assert next(stream).build_id == own_build
    _wait(lambda: services.changes.watched_keys() == 1)
    for stream in watches:
        stream.cancel()
    _wait(lambda: services.changes.watched_keys() == 0)


def _wait(condition: object, timeout_s: float = 60) -> None:
    """A bound against a hang on a busy machine, not a speed."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# ---- a refused start reads nothing; downloads stream ------------------------------------------

MAX_UPLOAD_BYTES = 8 << 20


@pytest.fixture
def files_api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, max_upload_bytes=MAX_UPLOAD_BYTES),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def test_a_start_refused_for_a_running_build_reads_no_corpus(files_api: RunningApi) -> None:
    """The corpus's file's contents are gone: reading it would fail the start with another error."""
    with files_api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client)
        ids = []
        for language, text in (("en", b"In the beginning\n"), ("sw", b"Hapo mwanzo\n")):
            file = client.post(
                "/files", data={"format": "Text", "name": "MAT.txt"}, files={"file": ("f", text)}
            ).json()
            corpus = client.post("/corpora", json={"language": language, "files": [{"fileId": file["id"]}]})
            ids.append((file["id"], corpus.json()["id"]))
        pc = client.post(
            f"/translation/engines/{engine['id']}/parallel-corpora",
            json={"sourceCorpusIds": [ids[0][1]], "targetCorpusIds": [ids[1][1]]},
        )
        assert pc.status_code == 201, pc.text
        builds_url = f"/translation/engines/{engine['id']}/builds"
        assert client.post(builds_url, json={}).status_code == 201
        set_chunks(files_api, ids[0][0])
        refused = client.post(builds_url, json={})
        assert refused.status_code == 409, refused.text
        assert "already has a build" in refused.json()["message"]
        assert client.post(f"/translation/engines/{engine['id']}/current-build/cancel").status_code == 200
        unreadable = client.post(builds_url, json={})
        assert unreadable.status_code != 409, "the corpus is read once no build runs"


def test_downloads_stream_with_their_name_and_type(files_api: RunningApi) -> None:
    data = secrets.token_hex(3 << 20).encode()[: 5 << 20] + b"\n"
    with files_api.client(scopes=ALL_SCOPES) as client:
        created = client.post(
            "/files", data={"format": "Text", "name": "Génesis.txt"}, files={"file": ("f", data)}
        )
        assert created.status_code == 201, created.text
        file_id = created.json()["id"]
        for method in ("GET", "POST"):
            with client.stream(method, f"/files/{file_id}/contents") as response:
                assert response.status_code == 200
                assert response.headers["transfer-encoding"] == "chunked"
                assert "content-length" not in response.headers
                assert response.headers["content-type"] == "text/plain; charset=utf-8"
                assert response.headers["content-disposition"] == (
                    "attachment; filename=\"Genesis.txt\"; filename*=UTF-8''G%C3%A9nesis.txt"
                )
                chunks = list(response.iter_raw())
            assert b"".join(chunks) == data
        set_chunks(files_api, file_id)  # no chunk and nothing in the store
        gone = client.get(f"/files/{file_id}/contents")
        assert gone.status_code >= 400 and gone.headers.get("transfer-encoding") != "chunked"
