"""Property-based fuzzing of the node stream (`InferenceNodeApi.Connect`). After a valid Hello a
node sends a random sequence of NodeMessages (heartbeats, results for unknown requests, model
statuses with random refs, states and huge messages, more Hellos, Goodbyes) and, in the second
property, frames of random bytes. Whatever it sent, the API service keeps running, the stream
either still gets work routed to it and answered or has ended with a clear status, no wait is
unbounded, and a session whose stream ended leaves the registry."""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from serval.inference.v1 import node_pb2
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.service.keys import create_node_token
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_fuzz_grpc import CRASHES, messages
from tests.helpers import fresh_database

pytestmark = [pytest.mark.database, pytest.mark.timeout(300)]

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
MAX_MESSAGE_BYTES = 64 << 10
"""Small, so the fuzz's huge model status messages also cross the gRPC message limit."""
STREAM_DEADLINE_S = 30.0
WAIT_S = 10.0
CONNECT = "/serval.inference.v1.InferenceNodeApi/Connect"


class RawNode:
    """One node stream driven frame by frame: any bytes go out, ApiMessages come in."""

    _ids = itertools.count()

    def __init__(self, channel: grpc.Channel, token: str) -> None:
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self.inbox: queue.Queue[node_pb2.ApiMessage | grpc.RpcError | None] = queue.Queue()
        self.ended: grpc.StatusCode | None = None
        self.node_id = f"fuzz-{next(self._ids)}"
        connect = channel.stream_stream(
            CONNECT, request_serializer=bytes, response_deserializer=node_pb2.ApiMessage.FromString
        )
        self.call: Any = connect(
            self._frames(), metadata=(("authorization", f"Bearer {token}"),), timeout=STREAM_DEADLINE_S
        )
        threading.Thread(target=self._receive, daemon=True).start()

    def _frames(self) -> Iterator[bytes]:
        while (frame := self._outbox.get()) is not None:
            yield frame

    def _receive(self) -> None:
        try:
            for message in self.call:
                self.inbox.put(message)
        except grpc.RpcError as error:
            self.inbox.put(error)
            return
        self.inbox.put(None)

    def send(self, frame: bytes | node_pb2.NodeMessage) -> None:
        self._outbox.put(frame if isinstance(frame, bytes) else frame.SerializeToString())

    def hello(self) -> str:
        hello = node_pb2.Hello(
            protocol_version=node_pb2.PROTOCOL_VERSION_2, node_id=self.node_id, free_slots=2
        )
        self.send(node_pb2.NodeMessage(hello=hello))
        message = self.next()
        assert message is not None and message.HasField("welcome"), message
        return message.welcome.session_id

    def next(self, timeout_s: float = WAIT_S) -> node_pb2.ApiMessage | None:
        """The next message; None once the stream has ended (its status in `ended`)."""
        if self.ended is not None:
            return None
        item = self.inbox.get(timeout=timeout_s)
        if isinstance(item, grpc.RpcError):
            self.ended = item.code()
            return None
        if item is None:
            self.ended = grpc.StatusCode.OK
        return item

    def work(self) -> node_pb2.WorkItem | None:
        """The next work item, skipping loads, unloads, drains and cancels; None if the stream ended."""
        try:
            while (message := self.next()) is not None:
                if message.HasField("work"):
                    return message.work
        except queue.Empty:
            raise AssertionError(f"no work item and no end of the stream within {WAIT_S:g} s") from None
        return None

    def hang_up(self) -> None:
        self._outbox.put(None)

    def close(self) -> None:
        self.hang_up()
        self.call.cancel()


class Harness:
    """The API service, a built nmt engine and a node token: what a probe needs to route work."""

    def __init__(self, api: RunningApi, token: str, engine_id: str) -> None:
        self.api = api
        self.token = token
        self.engine_id = engine_id
        self.model = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")
        self.client = api.client()
        self.pool = ThreadPoolExecutor(2)

    def session_ids(self) -> set[str]:
        assert self.api.service.services is not None
        registry = self.api.service.services.dispatcher.registry  # type: ignore[attr-defined]

        async def ids() -> set[str]:
            return {session.session_id for session in registry.sessions()}

        return self.api.run(ids())

    def gone(self, session_id: str) -> bool:
        """Whether the session leaves the registry within the wait."""
        deadline = time.monotonic() + WAIT_S
        while session_id in self.session_ids():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def probe(self, node: RawNode) -> httpx.Response | None:
        """Make the node ready and translate through it: the answer, or None if its stream ended."""
        node.send(node_pb2.NodeMessage(heartbeat=node_pb2.Heartbeat(free_slots=2, draining=False)))
        ready = node_pb2.ModelStatus(model=self.model, state=node_pb2.MODEL_STATE_READY)
        node.send(node_pb2.NodeMessage(model_status=ready))
        answer = self.pool.submit(
            self.client.post, f"/translation/engines/{self.engine_id}/translate", json="probe"
        )
        item = node.work()
        if item is None:
            response = answer.result(timeout=WAIT_S + 5)
            assert response.status_code < 500 or response.status_code == 503, response.text
            return None
        output = node_pb2.TranslateOutput(results=[node_pb2.TranslationResult(translation="probed")])
        node.send(
            node_pb2.NodeMessage(result=node_pb2.WorkResult(request_id=item.request_id, translate=output))
        )
        return answer.result(timeout=WAIT_S + 5)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.client.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    home = tmp_path_factory.mktemp("fuzz-nodes")
    with fresh_database(home) as url:
        api_settings = ApiSettings(
            host="127.0.0.1",
            grpc_port=0,
            rest_port=0,
            heartbeat_interval_s=0.5,
            node_timeout_s=3.0,
            request_timeout_s=3.0,
            max_grpc_message_bytes=MAX_MESSAGE_BYTES,
        )
        api = RunningApi(Settings(home=home, database_url=url, api=api_settings))
        try:
            assert api.service.services is not None
            _, token = api.run(create_node_token(api.service.services.db, "fuzz"))
            running = Harness(api, token, built_engine(api))
            try:
                yield running
            finally:
                running.close()
        finally:
            api.close()


def built_engine(api: RunningApi) -> str:
    with api.client() as client:
        engine_id: str = create_engine(client)["id"]
        assert (
            client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []}).status_code == 201
        )
    spec = api.launcher.specs[-1]
    job = (("authorization", f"Bearer {spec.job_token}"),)
    platform = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    platform.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=job)
    platform.BuildCompleted(platform_pb2.BuildCompletedRequest(build_id=spec.build_id), metadata=job)
    return engine_id


def node_messages(fleet: Harness) -> st.SearchStrategy[Message]:
    hints = {
        "engine_id": st.just(fleet.engine_id),
        "location": st.sampled_from([fleet.model.location, f"models/{fleet.engine_id}/2", "../x"]),
        "request_id": st.sampled_from(["", "not-a-request"]),
        "message": st.builds(lambda n: "m" * n, st.sampled_from([0, 10, 2001, MAX_MESSAGE_BYTES + 1])),
    }
    return messages(node_pb2.NodeMessage.DESCRIPTOR, hints)


def check_session(fleet: Harness, script: list[Any]) -> None:
    """Hello, the script, then a probe; the stream must stay usable or end clearly and be forgotten."""
    node = RawNode(fleet.api.channel, fleet.token)
    try:
        session_id = node.hello()
        for frame in script:
            node.send(frame)
        response = fleet.probe(node)
        if response is not None:
            assert response.status_code == 200, response.text
            assert response.json()["translation"] == "probed"
            assert session_id in fleet.session_ids()
            node.hang_up()
            while node.next() is not None:
                pass
        problems = [
            *([f"the stream ended with {node.ended}"] if node.ended in CRASHES else []),
            *([] if fleet.gone(session_id) else [f"the session outlived its stream ({node.ended})"]),
        ]
        assert not problems, "; ".join(problems)
    finally:
        node.close()


def _settings() -> Any:
    return settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


def test_a_clean_node_is_served(fleet: Harness) -> None:
    check_session(fleet, [])
    assert fleet.session_ids() == set()


def test_random_node_messages(fleet: Harness) -> None:
    @_settings()
    @given(script=st.lists(node_messages(fleet), max_size=8))
    def run(script: list[node_pb2.NodeMessage]) -> None:
        check_session(fleet, script)

    run()


def test_random_frames(fleet: Harness) -> None:
    """Bytes that may not parse as a NodeMessage at all, between valid messages."""
    frames = st.one_of(node_messages(fleet), st.binary(min_size=1, max_size=12))

    @_settings()
    @given(script=st.lists(frames, max_size=6))
    def run(script: list[Any]) -> None:
        check_session(fleet, script)

    run()


def test_random_hello(fleet: Harness) -> None:
    """Any Hello gets a Welcome or a Rejection; a welcomed node that hangs up is forgotten."""
    hints = {
        "protocol_version": st.just(node_pb2.PROTOCOL_VERSION_2),
        "free_slots": st.integers(1, 4),
        "node_id": st.sampled_from(["n", "n" * 201, "n\x00", "é" * 100]),
    }
    hellos = messages(node_pb2.Hello.DESCRIPTOR, hints)

    @_settings()
    @given(hello=hellos)
    def run(hello: node_pb2.Hello) -> None:
        node = RawNode(fleet.api.channel, fleet.token)
        try:
            message = node_pb2.NodeMessage(hello=hello)
            node.send(message)
            first = node.next()
            if message.ByteSize() > MAX_MESSAGE_BYTES:
                assert first is None and node.ended == grpc.StatusCode.RESOURCE_EXHAUSTED
                return
            assert first is not None, f"no Welcome or Rejection; the stream ended with {node.ended}"
            assert first.WhichOneof("body") in ("welcome", "rejection"), first
            node.hang_up()
            while node.next() is not None:
                pass
            assert node.ended not in CRASHES, f"the stream ended with {node.ended}"
            if first.HasField("welcome"):
                assert fleet.gone(first.welcome.session_id)
        finally:
            node.close()

    run()


def test_undecodable_frame_after_hello(fleet: Harness) -> None:
    """A truncated tag: the stream ends with a clear status and its session is forgotten."""
    check_session(fleet, [b"\xff\xff\xff"])


def test_oversized_message(fleet: Harness) -> None:
    big = node_pb2.ModelStatus(model=fleet.model, message="m" * (MAX_MESSAGE_BYTES + 1))
    node = RawNode(fleet.api.channel, fleet.token)
    try:
        session_id = node.hello()
        node.send(node_pb2.NodeMessage(model_status=big))
        while node.next() is not None:
            pass
        assert node.ended == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert fleet.gone(session_id)
    finally:
        node.close()
