"""Model store faults while an inference node loads a model revision, on real parts: moto's
S3-protocol server running in this process (stopped and restarted on the same port, keeping its
objects), a real `ModelManager` and the session's tiny CTranslate2 model.

- The store going away during a load: the old revision keeps serving, the load stays LOADING and
  is retried with backoff (each failed attempt announced with what failed and when the next
  attempt is, and counted in the node's metrics), and it completes once the store is back.
- A file failing checksum verification: fetched once more, then FAILED with a message naming
  the file; the revision is never served, and nothing corrupt is left in the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ctranslate2
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import ThreadedWSGIServer

from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import ModelManager
from inference_gpu.store_fetch import LoadAbandoned
from serval.inference.v1 import node_pb2
from serval_common.manifest import ChecksumMismatch, Manifest, fetch_folder, publish_folder
from serval_common.settings import NodeSettings, Settings
from serval_common.store import ModelStore, StoreError, open_store
from tests.helpers import distinct_weights, free_port

VERSE = "Blessed are the peacemakers, for they shall be called children of God."
PROGRESS_BOUND_S = 30.0
"""How long a scenario waits for something that should happen in well under a second; only a
bound so that a broken build fails instead of hanging."""


class _TrackingServer(ThreadedWSGIServer):
    """werkzeug's threaded server, remembering open connections so that a stop can drop them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        with self._lock:
            self.connections.add(connection)
        return connection, address

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self._lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class RestartableS3Server(ThreadedMotoServer):
    """moto's S3-protocol server in this process on a fixed loopback port, which can go away and
    come back: moto's backends are process-global, so a restart keeps every bucket and object.

    `ThreadedMotoServer.stop` only stops accepting (the socket keeps listening, so clients hang,
    and keep-alive connections are still served); here a stop closes the listening socket and
    every open connection, as a crashed server would, so clients are refused at once.
    """

    def __init__(self, port: int | None = None) -> None:
        super().__init__(ip_address="127.0.0.1", port=port or free_port(), verbose=False)
        self.endpoint = f"http://127.0.0.1:{self._port}"
        self.running = False

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = _TrackingServer(self._ip_address, self._port, app, MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    def start(self) -> None:
        if self.running:
            return
        super().start()
        self.running = True

    def stop(self) -> None:
        if not self.running:
            return
        super().stop()
        server = self._server
        assert isinstance(server, _TrackingServer)
        server.server_close()
        server.drop_connections()
        self.running = False


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RestartableS3Server]:
    """A bucket `models` on a restartable S3-protocol server. The store makes one attempt per call
    (`s3_store`) so that the node's own retries are what the tests see."""
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    server = RestartableS3Server()
    server.start()
    try:
        boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket="models")
        yield server
    finally:
        server.stop()


def s3_store(server: RestartableS3Server) -> ModelStore:
    return open_store("s3://models/serval", endpoint_url=server.endpoint, max_attempts=1)


def ref(revision: int) -> node_pb2.ModelRef:
    return node_pb2.ModelRef(engine_id="e1", revision=revision, location=f"models/e1/{revision}")


def publish_revision(store: ModelStore, model_dir: Path, revision: int, engine_id: str = "e1") -> Manifest:
    manifest = Manifest(
        kind="model-revision",
        engine_id=engine_id,
        revision=revision,
        source_language="eng_Latn",
        target_language="swh_Latn",
        ctranslate2_version=ctranslate2.__version__,
        quantization="int8",
    )
    # Each revision its own weights, as fine-tunes: none is an alias of another's loaded model.
    return publish_folder(
        store,
        f"models/{engine_id}/{revision}",
        distinct_weights(model_dir, f"{engine_id}-{revision}"),
        manifest,
    )


def corrupt(store: ModelStore, key: str) -> bytes:
    """Flip the bytes of an object in the model store, keeping its size; return the original."""
    original = store.read_bytes(key)
    store.write_bytes(key, bytes(b ^ 0xFF for b in original))
    return original


@dataclass
class Node:
    """A `ModelManager` as an inference node holds it, with what it announced."""

    models: ModelManager
    metrics: NodeMetrics
    events: list[node_pb2.ModelStatus] = field(default_factory=list)

    def states(self, revision: int) -> list[str]:
        return [
            node_pb2.ModelState.Name(e.state).removeprefix("MODEL_STATE_")
            for e in self.events
            if e.model.revision == revision
        ]

    def messages(self, revision: int, state: int) -> list[str]:
        return [e.message for e in self.events if e.model.revision == revision and e.state == state]

    def failures(self, reason: str) -> float:
        return float(self.metrics.load_failures.labels(reason=reason)._value.get())

    def failed(self, reason: str) -> float:
        return float(self.metrics.loads_failed.labels(reason=reason)._value.get())

    def retrying(self) -> float:
        return float(self.metrics.loads_retrying._value.get())


def node(tmp_path: Path, store: ModelStore, **node_settings: Any) -> Node:
    retry = {"load_retry_initial_s": 0.05, "load_retry_max_s": 0.2, "load_retry_s": 60.0}
    settings = Settings(home=tmp_path, node=NodeSettings(**{**retry, **node_settings}))
    metrics = NodeMetrics()
    manager = ModelManager(settings, store, metrics)
    result = Node(manager, metrics)
    manager.listeners.append(result.events.append)
    return result


async def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PROGRESS_BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


def retry_announcements(n: Node, revision: int) -> list[str]:
    return [
        m
        for m in n.messages(revision, node_pb2.MODEL_STATE_LOADING)
        if m.startswith("model store unavailable")
    ]


def test_store_outage_during_a_load_is_retried_and_the_old_revision_keeps_serving(
    tmp_path: Path, tiny_ct2_model: Path, s3_server: RestartableS3Server
) -> None:
    store = s3_store(s3_server)
    publish_revision(store, tiny_ct2_model, 1)
    publish_revision(store, tiny_ct2_model, 2)
    n = node(tmp_path, store)

    async def scenario() -> None:
        old = await n.models.get(ref(1))
        await asyncio.to_thread(s3_server.stop)
        first = asyncio.create_task(n.models.get(ref(2)))
        await eventually(lambda: len(retry_announcements(n, 2)) >= 2, "two failed attempts announced")
        second = asyncio.create_task(n.models.get(ref(2)))
        await eventually(lambda: len(retry_announcements(n, 2)) >= 3, "a third failed attempt announced")

        message = retry_announcements(n, 2)[-1]
        assert "could not read models/e1/2/manifest.json" in message
        assert "next attempt in" in message and "UTC" in message
        assert set(n.states(2)) == {"LOADING"}, "a retried load stays LOADING"
        assert n.failures("store_unavailable") >= 3
        assert n.retrying() == 1
        assert n.failed("store_unavailable") == 0
        assert n.models.held.loaded() == ["models/e1/1"]
        assert (await n.models.get(ref(1))) is old
        served = await old.translate(VERSE, 1, "eng_Latn", "swh_Latn")
        assert served and served[0].translation, "the old revision serves during the outage"

        stopped_attempts = n.failures("store_unavailable")
        await asyncio.to_thread(s3_server.start)
        restarted = time.monotonic()
        new, again = await asyncio.gather(first, second)
        recovery_s = time.monotonic() - restarted
        assert new is again, "callers during the retries share the one load"
        assert n.states(2)[-1] == "READY" and n.states(2).count("READY") == 1
        assert n.retrying() == 0
        assert n.failed("store_unavailable") == 0 and n.failed("other") == 0
        assert sorted(n.models.held.loaded()) == ["models/e1/1", "models/e1/2"]
        assert (await new.translate(VERSE, 1, "eng_Latn", "swh_Latn"))[0].translation
        print(
            f"{len(retry_announcements(n, 2))} failed attempts announced "
            f"({stopped_attempts:g} counted while stopped), revision 2 ready {recovery_s:.2f} s "
            "after the store came back"
        )
        await n.models.close()

    asyncio.run(scenario())


def test_store_outage_past_the_retry_budget_fails_the_load(
    tmp_path: Path, tiny_ct2_model: Path, s3_server: RestartableS3Server
) -> None:
    store = s3_store(s3_server)
    publish_revision(store, tiny_ct2_model, 1)
    n = node(tmp_path, store, load_retry_s=0.3)

    async def scenario() -> None:
        await asyncio.to_thread(s3_server.stop)
        with pytest.raises(StoreError, match=r"unreachable for 0\.3 s \(\d+ attempts\)"):
            await n.models.get(ref(1))
        assert n.states(1)[0] == "LOADING" and n.states(1)[-1] == "FAILED"
        assert "could not read models/e1/1/manifest.json" in n.messages(1, node_pb2.MODEL_STATE_FAILED)[0]
        assert n.failed("store_unavailable") == 1
        assert n.failures("store_unavailable") == len(retry_announcements(n, 1)) + 1
        assert n.retrying() == 0
        assert n.models.held.loaded() == []

        await asyncio.to_thread(s3_server.start)
        model = await n.models.get(ref(1))
        assert n.states(1)[-1] == "READY", "asked again once the store is back, the load succeeds"
        assert (await model.translate(VERSE, 1, "eng_Latn", "swh_Latn"))[0].translation
        await n.models.close()

    asyncio.run(scenario())


def test_unload_or_close_during_retries_stops_them(
    tmp_path: Path, tiny_ct2_model: Path, s3_server: RestartableS3Server
) -> None:
    store = s3_store(s3_server)
    publish_revision(store, tiny_ct2_model, 1)
    publish_revision(store, tiny_ct2_model, 2)
    n = node(tmp_path, store)

    async def scenario() -> None:
        await asyncio.to_thread(s3_server.stop)
        unloaded = asyncio.create_task(n.models.get(ref(1)))
        closed = asyncio.create_task(n.models.get(ref(2)))
        await eventually(
            lambda: bool(retry_announcements(n, 1)) and bool(retry_announcements(n, 2)),
            "both loads retrying",
        )
        assert n.retrying() == 2

        await n.models.unload(ref(1))
        with pytest.raises(LoadAbandoned):
            await unloaded
        assert n.states(1)[-1] == "UNLOADED"
        assert n.retrying() == 1

        await n.models.close()
        assert closed.done() and isinstance(closed.exception(), LoadAbandoned)
        assert n.retrying() == 0
        attempts = n.failures("store_unavailable")
        await asyncio.sleep(0.5)
        assert n.failures("store_unavailable") == attempts, "no attempt after the loads were stopped"
        assert n.failed("store_unavailable") == 0, "an abandoned load is not a failed one"

    asyncio.run(scenario())


def test_a_revision_failing_checksum_is_fetched_once_more_then_never_served(
    tmp_path: Path, tiny_ct2_model: Path, s3_server: RestartableS3Server
) -> None:
    store = s3_store(s3_server)
    publish_revision(store, tiny_ct2_model, 1)
    publish_revision(store, tiny_ct2_model, 2)
    corrupt(store, "models/e1/2/model.bin")
    n = node(tmp_path, store)

    async def scenario() -> None:
        old = await n.models.get(ref(1))
        with pytest.raises(ChecksumMismatch) as failure:
            await n.models.get(ref(2))
        assert failure.value.key == "models/e1/2/model.bin"
        assert n.states(2) == ["LOADING", "LOADING", "FAILED"]
        [refetch] = n.messages(2, node_pb2.MODEL_STATE_LOADING)[1:]
        assert "fetching it once more" in refetch
        [message] = n.messages(2, node_pb2.MODEL_STATE_FAILED)
        assert "models/e1/2/model.bin" in message and "checksum" in message
        assert "not served" in message
        assert n.failures("checksum") == 2 and n.failed("checksum") == 1
        assert n.failures("store_unavailable") == 0 and n.retrying() == 0
        assert n.models.held.loaded() == ["models/e1/1"], "the failed revision is not served"
        assert (await old.translate(VERSE, 1, "eng_Latn", "swh_Latn"))[0].translation
        cached = tmp_path / "node-cache" / "models" / "e1" / "2"
        assert not any(p.is_file() for p in cached.rglob("*")), "no corrupt copy is left in the cache"
        await asyncio.sleep(0.3)
        assert n.states(2)[-1] == "FAILED" and len(n.states(2)) == 3, "it is not retried in a loop"
        await n.models.unload(ref(2))
        assert n.states(2)[-1] == "UNLOADED", "unloading a failed revision clears its failure"
        await n.models.close()

    asyncio.run(scenario())


def test_a_download_corrupted_once_is_fetched_again_and_served(
    tmp_path: Path, tiny_ct2_model: Path, s3_server: RestartableS3Server
) -> None:
    """A corrupt copy that the next fetch gets right (the store is repaired between the two
    attempts, standing in for a download corrupted in transit) loads normally."""
    store = s3_store(s3_server)
    publish_revision(store, tiny_ct2_model, 1)
    original = corrupt(store, "models/e1/1/model.bin")
    n = node(tmp_path, store)

    def repair(status: node_pb2.ModelStatus) -> None:
        if "fetching it once more" in status.message:
            store.write_bytes("models/e1/1/model.bin", original)

    n.models.listeners.append(repair)

    async def scenario() -> None:
        model = await n.models.get(ref(1))
        assert n.states(1) == ["LOADING", "LOADING", "READY"]
        assert n.failures("checksum") == 1 and n.failed("checksum") == 0
        assert (await model.translate(VERSE, 1, "eng_Latn", "swh_Latn"))[0].translation
        await n.models.close()

    asyncio.run(scenario())


def test_a_missing_revision_fails_at_once(tmp_path: Path, s3_server: RestartableS3Server) -> None:
    n = node(tmp_path, s3_store(s3_server))

    async def scenario() -> None:
        with pytest.raises(StoreError, match=r"no manifest\.json under models/e1/7"):
            await n.models.get(ref(7))
        assert n.states(7) == ["LOADING", "FAILED"], "a missing revision is not retried"
        assert n.failed("other") == 1 and n.failures("store_unavailable") == 0

    asyncio.run(scenario())


def test_a_damaged_cached_copy_or_stale_partial_download_is_never_used(
    tmp_path: Path, tiny_ct2_model: Path
) -> None:
    import os

    store = open_store((tmp_path / "store").as_uri())
    publish_revision(store, tiny_ct2_model, 1)
    cache = tmp_path / "cache"
    _, folder = fetch_folder(store, "models/e1/1", cache, with_checkpoint=False)
    expected = (folder / "model.bin").read_bytes()

    (folder / "model.bin").write_bytes(expected[: len(expected) // 2])
    stale = folder.with_name(f".partial-{folder.name}-{os.getpid()}-crashed")
    stale.mkdir()
    (stale / "model.bin").write_bytes(b"half a download")

    _, again = fetch_folder(store, "models/e1/1", cache, with_checkpoint=False)
    assert again == folder
    assert (again / "model.bin").read_bytes() == expected, "a truncated cached file is fetched afresh"
    assert not stale.exists(), "a partial download this process id left behind is removed"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]
