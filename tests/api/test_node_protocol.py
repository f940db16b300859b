"""The node ⇄ API stream, driven by a scripted peer over real gRPC: registration, rejection,
heartbeat loss, and credit-based dispatch. The real inference node is tested end to end in
tests/e2e; here the test plays the node so it can break the protocol on purpose."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_api.db.nodes import list_nodes
from serval_api.service.keys import create_node_token
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine


class ScriptedNode:
    """One node session opened by the test, which writes and reads messages by hand."""

    def __init__(self, target: str, token: str) -> None:
        self._outbox: queue.Queue[node_pb2.NodeMessage | None] = queue.Queue()
        self._closed = threading.Event()
        self.slots = 4
        self.channel = grpc.insecure_channel(target)
        stub = node_pb2_grpc.InferenceNodeApiStub(self.channel)
        self.call: Any = stub.Connect(self._messages(), metadata=(("authorization", f"Bearer {token}"),))
        self.inbox: queue.Queue[node_pb2.ApiMessage | grpc.RpcError] = queue.Queue()
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        try:
            for message in self.call:
                self.inbox.put(message)
        except grpc.RpcError as exc:
            self.inbox.put(exc)

    def _messages(self) -> Iterator[node_pb2.NodeMessage]:
        while (message := self._outbox.get()) is not None:
            yield message

    def send(self, **body: Any) -> None:
        self._outbox.put(node_pb2.NodeMessage(**body))

    def hello(
        self,
        *,
        version: int = node_pb2.PROTOCOL_VERSION_2,
        slots: int = 4,
        node_id: str = "n1",
        free_slots: int | None = None,
        batches: bool = False,
    ) -> None:
        """Without `free_slots`, an older node's Hello: `slots` sent as its free slots alone.
        `batches`: the node reads `WorkItems` (several work items in one message)."""
        self.slots = slots
        self.send(
            hello=node_pb2.Hello(
                protocol_version=version,
                node_id=node_id,
                device=node_pb2.DeviceInfo(kind="cpu", compute_type="int8"),
                free_slots=slots if free_slots is None else free_slots,
                slots=0 if free_slots is None else slots,
                batches=batches,
            )
        )

    def keep_alive(self, interval_s: float = 0.2) -> None:
        """Heartbeats saying every slot is free (the API service counts its own work in flight)."""

        def beat() -> None:
            while not self._closed.wait(interval_s):
                self.send(heartbeat=node_pb2.Heartbeat(free_slots=self.slots))

        threading.Thread(target=beat, daemon=True).start()

    def read(self, timeout_s: float = 10) -> node_pb2.ApiMessage:
        message = self.inbox.get(timeout=timeout_s)
        if isinstance(message, grpc.RpcError):
            raise message
        return message

    def close(self) -> None:
        self._closed.set()
        self._outbox.put(None)
        self.call.cancel()
        self.channel.close()


@contextlib.contextmanager
def fast_heartbeat_api(tmp_path: Path, database_url: str, **api: Any) -> Iterator[RunningApi]:
    """An API service expecting heartbeats every 0.2 s. It drops a node silent for 10 s: a bound, not
    a speed. The test's scripted nodes beat from a thread of the process that also runs the API
    service, and on a loaded machine a beat can be a second late; only the test of silence itself
    (`test_silent_node_is_dropped`) sets a short `node_timeout_s`."""
    fields: dict[str, Any] = {"heartbeat_interval_s": 0.2, "node_timeout_s": 10.0, **api}
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, **fields),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    with fast_heartbeat_api(tmp_path, database_url) as running:
        yield running


def new_node_token(api: RunningApi) -> str:
    assert api.service.services is not None
    _, plaintext = api.run(create_node_token(api.service.services.db, "test"))
    return plaintext


@pytest.fixture
def node_token(api: RunningApi) -> str:
    return new_node_token(api)


def node_rows(api: RunningApi) -> dict[str, str]:
    assert api.service.services is not None
    return {n.id: n.status for n in api.run(list_nodes(api.service.services.db))}


def wait_until(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_welcome_registers_the_node(api: RunningApi, node_token: str) -> None:
    node = ScriptedNode(api.grpc_target, node_token)
    try:
        node.hello(node_id="gpu-7")
        welcome = node.read().welcome
        assert welcome.protocol_version == node_pb2.PROTOCOL_VERSION_2
        assert welcome.session_id and welcome.heartbeat_interval_ms == 200
        wait_until(lambda: node_rows(api).get("gpu-7") == "connected")
    finally:
        node.close()
    wait_until(lambda: node_rows(api).get("gpu-7") == "gone")


@pytest.mark.parametrize("token", ["", "node_not-a-real-token"])
def test_bad_token_is_rejected(api: RunningApi, node_token: str, token: str) -> None:
    node = ScriptedNode(api.grpc_target, token)
    try:
        node.hello()
        rejection = node.read().rejection
        assert rejection.reason == node_pb2.REJECTION_REASON_BAD_TOKEN
        with pytest.raises(grpc.RpcError) as err:
            node.read()
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        node.close()
    assert "n1" not in node_rows(api)


@pytest.mark.parametrize("version", [node_pb2.PROTOCOL_VERSION_1, 99], ids=["older node", "unknown"])
def test_incompatible_protocol_version_is_rejected(api: RunningApi, node_token: str, version: int) -> None:
    """A node of the release whose results were Serval's client messages (version 1) is told
    which version to speak and to upgrade, and is never sent work it would misread."""
    node = ScriptedNode(api.grpc_target, node_token)
    try:
        node.hello(version=version)
        rejection = node.read().rejection
        assert rejection.reason == node_pb2.REJECTION_REASON_INCOMPATIBLE_PROTOCOL
        assert list(rejection.supported_protocol_versions) == [node_pb2.PROTOCOL_VERSION_2]
        assert f"protocol version {version} is not supported" in rejection.message
        assert "run the inference node of this API service's release" in rejection.message
        with pytest.raises(grpc.RpcError) as err:
            node.read()
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        node.close()


def test_hello_must_come_first(api: RunningApi, node_token: str) -> None:
    node = ScriptedNode(api.grpc_target, node_token)
    try:
        node.send(heartbeat=node_pb2.Heartbeat(free_slots=1))
        assert node.read().rejection.reason == node_pb2.REJECTION_REASON_BAD_HELLO
    finally:
        node.close()


def test_silent_node_is_dropped(tmp_path: Path, database_url: str) -> None:
    with fast_heartbeat_api(tmp_path, database_url, node_timeout_s=1.0) as api:
        node = ScriptedNode(api.grpc_target, new_node_token(api))
        try:
            node.hello(node_id="quiet")
            node.read()
            wait_until(lambda: node_rows(api).get("quiet") == "connected")
            # No heartbeats: after node_timeout_s (1 s) the API service closes the session.
            wait_until(lambda: node_rows(api).get("quiet") == "gone", timeout_s=5)
            with pytest.raises(grpc.RpcError):
                node.read()
        finally:
            node.close()


def test_stopping_the_api_service_writes_every_open_sessions_end(tmp_path: Path, database_url: str) -> None:
    """Nodes still connected when the API service stops: the gRPC server's stop cancels their
    handlers but may return before a handler has begun writing that its session ended. The service
    waits for those writes before closing its database; one cut off by the stop left SQLite
    locked, and the next API service on the same file could not start."""
    nodes: list[ScriptedNode] = []
    with fast_heartbeat_api(tmp_path, database_url) as api:
        token = new_node_token(api)
        for n in range(3):
            node = ScriptedNode(api.grpc_target, token)
            node.hello(node_id=f"open-{n}")
            assert node.read().HasField("welcome")
            nodes.append(node)
        wait_until(lambda: [node_rows(api).get(f"open-{n}") for n in range(3)] == ["connected"] * 3)
    try:
        after = RunningApi(
            Settings(
                home=tmp_path,
                database_url=database_url,
                api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
            )
        )
        try:
            assert [node_rows(after).get(f"open-{n}") for n in range(3)] == ["gone"] * 3
        finally:
            after.close()
    finally:
        for node in nodes:
            node.close()


def test_work_never_exceeds_advertised_slots(api: RunningApi, node_token: str) -> None:
    """Two slots, five concurrent translations: at most two work items are outstanding at once."""
    with api.client() as client:
        engine = create_engine(client)
        build = client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []}).json()
    spec = api.launcher.specs[-1]
    assert spec.build_id == build["id"]
    _complete_build(api, spec.build_id, spec.job_token)

    node = ScriptedNode(api.grpc_target, node_token)
    key = api.api_key()
    answers: list[int] = []

    def translate(i: int) -> None:
        with api.client() as c:
            c.headers["X-API-Key"] = key
            answers.append(
                c.post(f"/translation/engines/{engine['id']}/translate", json=f"verse {i}").status_code
            )

    try:
        node.hello(slots=2)
        node.read()
        node.keep_alive()
        clients = [threading.Thread(target=translate, args=(i,)) for i in range(5)]
        for thread in clients:
            thread.start()
        load = node.read().load_model.model
        assert load.location == f"models/{engine['id']}/1"
        node.send(model_status=node_pb2.ModelStatus(model=load, state=node_pb2.MODEL_STATE_READY))
        outstanding: list[node_pb2.WorkItem] = []
        served = 0
        while served < 5:
            while len(outstanding) < 2 and served + len(outstanding) < 5:
                outstanding.append(node.read().work)
            time.sleep(0.2)
            assert node.inbox.empty(), "the API service sent work beyond the node's free slots"
            item = outstanding.pop(0)
            result = node_pb2.TranslationResult(translation=item.translate.segment.upper())
            node.send(
                result=node_pb2.WorkResult(
                    request_id=item.request_id, translate=node_pb2.TranslateOutput(results=[result])
                )
            )
            served += 1
        for thread in clients:
            thread.join(10)
        assert answers == [200] * 5
    finally:
        node.close()


@pytest.mark.parametrize("batches", [True, False], ids=["batches", "earlier-node"])
def test_work_queued_together_travels_in_one_message_to_a_node_that_reads_batches(
    api: RunningApi, node_token: str, batches: bool
) -> None:
    """Eight requests wait for the model's load; once it is ready their work items are queued
    together and go in one `WorkItems` message to a node whose Hello says it reads them, and in a
    message each to a node of an earlier release. The node answers them all in one `WorkResults`
    (the Welcome says the API service reads it), and each request gets its own answer."""
    engine_id = _built_engine(api)
    assert api.service.services is not None
    dispatcher = api.service.services.dispatcher
    node = ScriptedNode(api.grpc_target, node_token)
    key = api.api_key()

    def translate(i: int) -> str:
        with api.client() as c:
            c.headers["X-API-Key"] = key
            c.timeout = 60
            response = c.post(f"/translation/engines/{engine_id}/translate", json=f"verse {i}")
            assert response.status_code == 200, response.text
            return str(response.json()["translation"])

    pool = ThreadPoolExecutor(8)
    try:
        node.hello(slots=8, free_slots=8, batches=batches)
        assert node.read().welcome.batches
        node.keep_alive()
        answers = [pool.submit(translate, i) for i in range(8)]
        load = node.read().load_model.model
        wait_until(lambda: dispatcher.queue_size() == 8, 60)
        node.send(model_status=node_pb2.ModelStatus(model=load, state=node_pb2.MODEL_STATE_READY))
        kinds: list[str] = []
        items: list[node_pb2.WorkItem] = []
        while len(items) < 8:
            message = node.read(30)
            kind = message.WhichOneof("body")
            if kind in ("work", "work_items"):
                kinds.append(kind)
                items.extend(message.work_items.items if kind == "work_items" else [message.work])
        if batches:
            assert "work_items" in kinds and len(kinds) < 8, kinds
        else:
            assert kinds == ["work"] * 8
        assert sorted(item.translate.segment for item in items) == [f"verse {i}" for i in range(8)]
        node.send(
            results=node_pb2.WorkResults(
                results=[
                    node_pb2.WorkResult(
                        request_id=item.request_id,
                        translate=node_pb2.TranslateOutput(
                            results=[node_pb2.TranslationResult(translation=item.translate.segment.upper())]
                        ),
                    )
                    for item in reversed(items)
                ]
            )
        )
        assert [a.result(timeout=60) for a in answers] == [f"VERSE {i}" for i in range(8)]
    finally:
        node.close()
        pool.shutdown(wait=False)


def _complete_build(api: RunningApi, build_id: str, job_token: str) -> None:
    from serval.translation.v1 import platform_pb2, platform_pb2_grpc

    stub = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    metadata = (("authorization", f"Bearer {job_token}"),)
    stub.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build_id), metadata=metadata)
    stub.BuildCompleted(platform_pb2.BuildCompletedRequest(build_id=build_id), metadata=metadata)


def test_work_a_draining_node_refuses_goes_to_another_node(api: RunningApi, node_token: str) -> None:
    with api.client() as client:
        engine = create_engine(client)
        client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []})
    spec = api.launcher.specs[-1]
    _complete_build(api, spec.build_id, spec.job_token)
    model = node_pb2.ModelRef(engine_id=engine["id"], revision=1, location=f"models/{engine['id']}/1")
    nodes = [ScriptedNode(api.grpc_target, node_token) for _ in range(2)]
    try:
        for index, node in enumerate(nodes):
            node.hello(node_id=f"node-{index}")
            node.read()
            node.keep_alive()
            node.send(model_status=node_pb2.ModelStatus(model=model, state=node_pb2.MODEL_STATE_READY))
        wait_until(lambda: sum(status == "connected" for status in node_rows(api).values()) == 2)
        time.sleep(0.2)

        with api.client() as client, ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, f"/translation/engines/{engine['id']}/translate", json="verse")
            first, item = next_work(nodes)
            first.send(
                result=node_pb2.WorkResult(
                    request_id=item.request_id,
                    error=node_pb2.WorkError(code=node_pb2.WORK_ERROR_CODE_OVERLOADED, message="draining"),
                )
            )
            second = nodes[1 - nodes.index(first)]
            retried = second.read().work
            assert retried.request_id == item.request_id
            done = node_pb2.TranslationResult(translation="from the other node")
            second.send(
                result=node_pb2.WorkResult(
                    request_id=retried.request_id, translate=node_pb2.TranslateOutput(results=[done])
                )
            )
            response = answer.result(timeout=10)
        assert response.status_code == 200, response.text
        assert response.json()["translation"] == "from the other node"
    finally:
        for node in nodes:
            node.close()


def next_work(nodes: list[ScriptedNode], timeout_s: float = 10) -> tuple[ScriptedNode, node_pb2.WorkItem]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in nodes:
            with contextlib.suppress(queue.Empty):
                message = node.read(timeout_s=0.05)
                if message.HasField("work"):
                    return node, message.work
    raise AssertionError("no node received the work item")


class HonestNode(ScriptedNode):
    """A scripted node whose heartbeats say what it runs: `elsewhere` slots taken by work other
    sessions sent, plus the work items of this session the test has read and not yet answered."""

    def __init__(self, target: str, token: str, *, slots: int, elsewhere: int) -> None:
        super().__init__(target, token)
        self.elsewhere = elsewhere
        self.running: list[node_pb2.WorkItem] = []
        self.hello(slots=slots, free_slots=slots - elsewhere)
        assert self.read().HasField("welcome")
        threading.Thread(target=self._beat, daemon=True).start()

    def _beat(self) -> None:
        while not self._closed.wait(0.05):
            self.send(
                heartbeat=node_pb2.Heartbeat(
                    free_slots=max(0, self.slots - self.elsewhere - len(self.running)),
                    slots=self.slots,
                    session_in_flight=len(self.running),
                )
            )

    def take(self, count: int) -> None:
        """Read `count` more work items, then check for a while that no further one comes."""
        while count:
            message = self.read()
            if message.HasField("work"):
                self.running.append(message.work)
                count -= 1
        time.sleep(0.5)
        extra = [m for m in list(self.inbox.queue) if not isinstance(m, grpc.RpcError) and m.HasField("work")]
        assert not extra, f"work beyond the node's free slots: {len(self.running)} running, {len(extra)} more"

    def answer(self, count: int) -> None:
        for item in self.running[:count]:
            done = node_pb2.TranslationResult(translation=item.translate.segment.upper())
            self.send(
                result=node_pb2.WorkResult(
                    request_id=item.request_id, translate=node_pb2.TranslateOutput(results=[done])
                )
            )
        del self.running[:count]


def _built_engine(api: RunningApi) -> str:
    with api.client() as client:
        engine = create_engine(client)
        client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []})
    spec = api.launcher.specs[-1]
    _complete_build(api, spec.build_id, spec.job_token)
    return str(engine["id"])


def _translations(api: RunningApi, engine_id: str, count: int) -> tuple[ThreadPoolExecutor, list[Any]]:
    key = api.api_key()

    def translate(i: int) -> int:
        with api.client() as c:
            c.headers["X-API-Key"] = key
            c.timeout = 30
            return c.post(f"/translation/engines/{engine_id}/translate", json=f"verse {i}").status_code

    pool = ThreadPoolExecutor(count)
    return pool, [pool.submit(translate, i) for i in range(count)]


def test_capacity_follows_the_free_slots_of_each_heartbeat(api: RunningApi, node_token: str) -> None:
    engine_id = _built_engine(api)
    node = HonestNode(api.grpc_target, node_token, slots=4, elsewhere=0)
    pool, answers = None, []
    try:
        model = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")
        node.send(model_status=node_pb2.ModelStatus(model=model, state=node_pb2.MODEL_STATE_READY))
        node.elsewhere = 3
        time.sleep(0.3)
        pool, answers = _translations(api, engine_id, 6)
        node.take(1)
        node.elsewhere = 1
        node.take(2)
        node.elsewhere = 0
        node.take(1)
        node.answer(2)
        node.take(2)
        node.answer(4)
        assert [a.result(timeout=20) for a in answers] == [200] * 6
    finally:
        node.close()
        if pool is not None:
            pool.shutdown(wait=False)


def test_a_node_reconnecting_busy_is_neither_over_nor_under_committed(
    api: RunningApi, node_token: str
) -> None:
    """The node reconnects (say, after a network blip) with 3 of its 4 slots still running work
    from its previous session: at first one slot is free; once that work ends, all four are."""
    engine_id = _built_engine(api)
    node = HonestNode(api.grpc_target, node_token, slots=4, elsewhere=3)
    pool, answers = None, []
    try:
        model = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")
        node.send(model_status=node_pb2.ModelStatus(model=model, state=node_pb2.MODEL_STATE_READY))
        pool, answers = _translations(api, engine_id, 5)
        node.take(1)
        node.elsewhere = 0
        node.take(3)
        node.answer(4)
        node.take(1)
        node.answer(1)
        assert [a.result(timeout=20) for a in answers] == [200] * 5
        assert api.service.services is not None
    finally:
        node.close()
        if pool is not None:
            pool.shutdown(wait=False)
