"""Admin control of nodes over REST and gRPC, with the test playing the node over real gRPC so it
sees every message the API service sends: the live node list, drain and undrain (kept across a
reconnect), pre-warming and unloading an engine, token revocation that ends the session, work
cancelled on the node when its caller goes away, and a hot engine spread onto a second node."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2

from serval.admin.v1 import admin_pb2, admin_pb2_grpc
from serval.inference.v1 import node_pb2
from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ADMIN
from serval_api.service.keys import create_node_token, revoke_node_token
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_node_protocol import (
    ScriptedNode,
    _complete_build,
    fast_heartbeat_api,
    new_node_token,
    wait_until,
)

GIB = 1 << 30


class ObedientNode(ScriptedNode):
    """A scripted node that heartbeats like the real one: its load, memory and drain state."""

    def __init__(self, target: str, token: str, node_id: str, slots: int = 4) -> None:
        super().__init__(target, token)
        self.draining = False
        self.free_slots = slots
        self.memory_free = 6 * GIB
        self.hello(node_id=node_id, slots=slots)
        welcome = self.read()
        assert welcome.HasField("welcome"), welcome

    def keep_alive(self, interval_s: float = 0.1) -> None:
        def beat() -> None:
            while not self._closed.wait(interval_s):
                self.beat()

        threading.Thread(target=beat, daemon=True).start()

    def beat(self) -> None:
        self.send(
            heartbeat=node_pb2.Heartbeat(
                free_slots=self.free_slots, memory_free_bytes=self.memory_free, draining=self.draining
            )
        )

    def expect(self, kind: str, timeout_s: float = 10) -> Any:
        """The next message of `kind`, obeying drain and undrain on the way."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.read(max(0.01, deadline - time.monotonic()))
            body = message.WhichOneof("body")
            if body in ("drain", "undrain"):
                self.draining = body == "drain"
                self.beat()
            if body == kind:
                return getattr(message, kind)

    def ready(self, location: str, size_bytes: int = 0, weights: str = "") -> None:
        engine_id, revision = location.split("/")[1:]
        ref = node_pb2.ModelRef(
            engine_id=engine_id, revision=int(revision), location=location, weights=weights
        )
        self.send(
            model_status=node_pb2.ModelStatus(
                model=ref, state=node_pb2.MODEL_STATE_READY, size_bytes=size_bytes
            )
        )


@pytest.fixture
def api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    with fast_heartbeat_api(tmp_path, database_url) as running:
        yield running


@pytest.fixture
def node_token(api: RunningApi) -> str:
    return new_node_token(api)


@pytest.fixture
def admin(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client("ops", (ADMIN,)) as client:
        yield client


@pytest.fixture
def built(api: RunningApi) -> str:
    return build_engine(api)


def build_engine(api: RunningApi) -> str:
    """An engine with revision 1 published; its id."""
    with api.client() as client:
        engine = create_engine(client)
        client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []})
    spec = api.launcher.specs[-1]
    _complete_build(api, spec.build_id, spec.job_token)
    return str(engine["id"])


def nodes_by_id(admin: httpx.Client) -> dict[str, dict[str, Any]]:
    listed = admin.get("/admin/nodes")
    assert listed.status_code == 200, listed.text
    return {node["id"]: node for node in listed.json()}


def test_the_node_list_shows_live_load_memory_and_models(
    api: RunningApi, admin: httpx.Client, node_token: str, built: str
) -> None:
    node = ObedientNode(api.grpc_target, node_token, "gpu-1", slots=4)
    try:
        node.free_slots = 3
        node.keep_alive()
        node.ready(f"models/{built}/1", size_bytes=123_456, weights="w-base")
        node.ready("models/sibling/4", size_bytes=123_456, weights="w-base")
        broken = node_pb2.ModelRef(engine_id="other", revision=2, location="models/other/2")
        node.send(
            model_status=node_pb2.ModelStatus(
                model=broken, state=node_pb2.MODEL_STATE_FAILED, message="checksum mismatch: model.bin"
            )
        )
        wait_until(lambda: len(nodes_by_id(admin).get("gpu-1", {}).get("models", [])) == 3)
        wait_until(lambda: nodes_by_id(admin)["gpu-1"]["inFlight"] == 1)
        listed = nodes_by_id(admin)["gpu-1"]
        assert listed["status"] == "serving" and not listed["drained"]
        assert (listed["slots"], listed["freeSlots"], listed["memoryFreeBytes"]) == (4, 3, 6 * GIB)
        assert listed["device"] == "cpu:0 int8" and listed["tokenId"]
        assert listed["models"] == [
            {
                "engineId": built,
                "revision": 1,
                "state": "ready",
                "message": "",
                "sizeBytes": 123_456,
                "weights": "w-base",
            },
            {
                "engineId": "other",
                "revision": 2,
                "state": "failed",
                "message": "checksum mismatch: model.bin",
                "sizeBytes": 0,
                "weights": "",
            },
            {
                "engineId": "sibling",
                "revision": 4,
                "state": "ready",
                "message": "",
                "sizeBytes": 123_456,
                "weights": "w-base",
            },
        ]
        # Two revisions share one loaded model: the memory held counts it once.
        assert (listed["loadedModels"], listed["memoryHeldBytes"]) == (2, 123_456)

        stub = admin_pb2_grpc.AdminApiStub(api.channel)
        as_admin = (("x-api-key", api.api_key("ops", (ADMIN,))),)
        [over_grpc] = stub.ListNodes(empty_pb2.Empty(), metadata=as_admin).nodes
        assert (over_grpc.id, over_grpc.status, over_grpc.slots, over_grpc.in_flight) == (
            "gpu-1",
            "serving",
            4,
            1,
        )
        assert [(m.engine_id, m.state, m.weights) for m in over_grpc.models] == [
            (built, "ready", "w-base"),
            ("other", "failed", ""),
            ("sibling", "ready", "w-base"),
        ]
        assert (over_grpc.loaded_models, over_grpc.memory_held_bytes) == (2, 123_456)
    finally:
        node.close()
    wait_until(lambda: nodes_by_id(admin)["gpu-1"]["status"] == "gone")
    assert not nodes_by_id(admin)["gpu-1"].get("models")


def test_drain_holds_across_reconnects_until_undrained(
    api: RunningApi, admin: httpx.Client, node_token: str, built: str
) -> None:
    node = ObedientNode(api.grpc_target, node_token, "gpu-1")
    translate = f"/translation/engines/{built}/translate"
    try:
        node.keep_alive()
        node.ready(f"models/{built}/1")
        drained = admin.post("/admin/nodes/gpu-1/drain", json={"reason": "driver update"})
        assert drained.status_code == 200, drained.text
        assert drained.json()["status"] == "draining" and drained.json()["drainReason"] == "driver update"
        time.sleep(0.3)  # heartbeats sent before the node reads the Drain still say "not draining"
        assert nodes_by_id(admin)["gpu-1"]["status"] == "draining", "the drain holds until the node hears"
        assert node.expect("drain").reason == "driver update"
        with api.client() as client:
            refused = client.post(translate, json="a verse", params={"timeout": 1})
        assert refused.status_code == 503, "the only node is drained: no work is routed to it"

        node.close()
        wait_until(lambda: nodes_by_id(admin)["gpu-1"]["status"] == "gone")
        assert nodes_by_id(admin)["gpu-1"]["drained"], "the drain outlives the session"
        node = ObedientNode(api.grpc_target, node_token, "gpu-1")
        node.keep_alive()
        assert node.expect("drain").reason == "driver update", "a reconnecting node is drained again"
        wait_until(lambda: nodes_by_id(admin)["gpu-1"]["status"] == "draining")

        undrained = admin.post("/admin/nodes/gpu-1/undrain")
        assert undrained.status_code == 200 and not undrained.json()["drained"]
        node.expect("undrain")
        wait_until(lambda: nodes_by_id(admin)["gpu-1"]["status"] == "serving")
        node.ready(f"models/{built}/1")
        with api.client() as client, ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, translate, json="a verse")
            item = node.expect("work")
            result = node_pb2.TranslationResult(translation="served again")
            node.send(
                result=node_pb2.WorkResult(
                    request_id=item.request_id, translate=node_pb2.TranslateOutput(results=[result])
                )
            )
            assert answer.result(10).json()["translation"] == "served again"
    finally:
        node.close()
    assert admin.post("/admin/nodes/nobody/drain").status_code == 404
    assert admin.post("/admin/nodes/gpu-1/drain", json={"reason": "x" * 201}).status_code == 400


def test_load_and_unload_an_engine_on_a_node(
    api: RunningApi, admin: httpx.Client, node_token: str, built: str
) -> None:
    node = ObedientNode(api.grpc_target, node_token, "gpu-1")
    location = f"models/{built}/1"
    try:
        node.keep_alive()
        wait_until(lambda: nodes_by_id(admin).get("gpu-1", {}).get("status") == "serving")
        loading = admin.post("/admin/nodes/gpu-1/models", json={"engineId": built})
        assert loading.status_code == 202, loading.text
        assert [m["state"] for m in loading.json()["models"]] == ["loading"]
        assert node.expect("load_model").model.location == location
        node.ready(location)
        wait_until(lambda: [m["state"] for m in nodes_by_id(admin)["gpu-1"]["models"]] == ["ready"])

        unloaded = admin.delete(f"/admin/nodes/gpu-1/models/{built}")
        assert unloaded.status_code == 200 and not unloaded.json().get("models")
        assert node.expect("unload_model").model.location == location

        with api.client() as client:
            unbuilt = create_engine(client)["id"]
        stub = admin_pb2_grpc.AdminApiStub(api.channel)
        as_admin = (("x-api-key", api.api_key("ops", (ADMIN,))),)
        cases = [
            (
                admin_pb2.NodeEngineRequest(node_id="gpu-1", engine_id=unbuilt),
                grpc.StatusCode.FAILED_PRECONDITION,
            ),
            (admin_pb2.NodeEngineRequest(node_id="gpu-1", engine_id="nope"), grpc.StatusCode.NOT_FOUND),
            (admin_pb2.NodeEngineRequest(node_id="gpu-9", engine_id=built), grpc.StatusCode.NOT_FOUND),
            (
                admin_pb2.NodeEngineRequest(node_id="gpu-1", engine_id=built, revision=7),
                grpc.StatusCode.FAILED_PRECONDITION,
            ),
        ]
        for request, code in cases:
            with pytest.raises(grpc.RpcError) as error:
                stub.LoadEngine(request, metadata=as_admin)
            assert error.value.code() == code, request
        over_grpc = stub.LoadEngine(
            admin_pb2.NodeEngineRequest(node_id="gpu-1", engine_id=built), metadata=as_admin
        )
        assert [(m.revision, m.state) for m in over_grpc.models] == [(1, "loading")]
        node.expect("load_model")
        with pytest.raises(grpc.RpcError) as error:
            stub.UnloadEngine(
                admin_pb2.NodeEngineRequest(node_id="gpu-1", engine_id="nope"), metadata=as_admin
            )
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as error:
            stub.DrainNode(
                admin_pb2.DrainNodeRequest(node_id="gpu-1"), metadata=(("x-api-key", api.api_key()),)
            )
        assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
        drained = stub.DrainNode(
            admin_pb2.DrainNodeRequest(node_id="gpu-1", reason="maintenance"), metadata=as_admin
        )
        assert drained.drained and drained.drain_reason == "maintenance"
        assert not stub.UndrainNode(admin_pb2.NodeRequest(node_id="gpu-1"), metadata=as_admin).drained
    finally:
        node.close()
    with api.client() as client:
        assert client.get("/admin/nodes").status_code == 403, "node control needs the admin scope"


def _disconnected_after(node: ScriptedNode, started: float, timeout_s: float) -> float:
    """Seconds from `started` until the API service ended the session with a Rejection and
    UNAUTHENTICATED."""
    rejection = None
    while True:
        try:
            message = node.read(timeout_s)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
            assert rejection is not None and rejection.reason == node_pb2.REJECTION_REASON_BAD_TOKEN
            return time.monotonic() - started
        if message.HasField("rejection"):
            rejection = message.rejection


def test_revoking_a_node_token_disconnects_its_nodes(tmp_path: Path, database_url: str) -> None:
    """Over the admin API at once; written to the database by other means, within
    `api.node_token_check_s`."""
    with (
        fast_heartbeat_api(tmp_path, database_url, node_token_check_s=0.5) as api,
        api.client("ops", (ADMIN,)) as admin,
    ):
        _revoke_and_watch(api, admin)


def _revoke_and_watch(api: RunningApi, admin: httpx.Client) -> None:
    assert api.service.services is not None
    db = api.service.services.db
    first, first_token = api.run(create_node_token(db, "pool-a"))
    second, second_token = api.run(create_node_token(db, "pool-b"))
    over_rest = ObedientNode(api.grpc_target, first_token, "gpu-1")
    on_the_database = ObedientNode(api.grpc_target, second_token, "gpu-2")
    try:
        over_rest.keep_alive()
        on_the_database.keep_alive()
        wait_until(lambda: {n["status"] for n in nodes_by_id(admin).values()} == {"serving"})

        started = time.monotonic()
        assert admin.delete(f"/admin/node-tokens/{first.id}").status_code == 200
        seconds = _disconnected_after(over_rest, started, timeout_s=1.0)
        print(f"revoked over REST: disconnected after {seconds:.3f} s")

        started = time.monotonic()
        api.run(revoke_node_token(db, second.id))  # as `serval admin node-token revoke` does
        seconds = _disconnected_after(on_the_database, started, timeout_s=3.0)
        print(f"revoked in the database: disconnected after {seconds:.3f} s")
        wait_until(lambda: {n["status"] for n in nodes_by_id(admin).values()} == {"gone"})
        assert nodes_by_id(admin)["gpu-1"]["tokenId"] == first.id
    finally:
        over_rest.close()
        on_the_database.close()


def test_a_caller_that_goes_away_cancels_its_work_on_the_node(
    api: RunningApi, node_token: str, built: str
) -> None:
    node = ObedientNode(api.grpc_target, node_token, "gpu-1")
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    metadata = (("x-api-key", api.api_key()),)
    try:
        node.keep_alive()
        node.ready(f"models/{built}/1")
        time.sleep(0.2)
        call = stub.Translate.future(
            engine_pb2.TranslateRequest(engine_id=built, segment="a verse"), metadata=metadata
        )
        item = node.expect("work")
        call.cancel()
        assert node.expect("cancel").request_id == item.request_id

        with pytest.raises(grpc.RpcError) as error:
            stub.Translate(
                engine_pb2.TranslateRequest(engine_id=built, segment="a verse"),
                metadata=metadata,
                timeout=0.5,
            )
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        item = node.expect("work")
        assert node.expect("cancel").request_id == item.request_id

        with api.client() as client, pytest.raises(httpx.ReadTimeout):
            client.post(f"/translation/engines/{built}/translate", json="a verse", timeout=0.5)
        item = node.expect("work")
        assert node.expect("cancel").request_id == item.request_id, "a REST caller hanging up cancels too"
    finally:
        node.close()


def test_a_hot_engine_is_spread_onto_another_node(
    api: RunningApi, admin: httpx.Client, node_token: str, built: str
) -> None:
    location = f"models/{built}/1"
    holder = ObedientNode(api.grpc_target, node_token, "gpu-1", slots=2)
    spare = ObedientNode(api.grpc_target, node_token, "gpu-2", slots=2)
    try:
        holder.keep_alive()
        spare.keep_alive()
        holder.ready(location)
        # a bound, not a speed: the admin list reads what the heartbeats wrote (slow on a busy machine)
        wait_until(lambda: len(nodes_by_id(admin)["gpu-1"].get("models", [])) == 1, 30)
        with api.client() as client, ThreadPoolExecutor(3) as pool:
            answers = [
                pool.submit(client.post, f"/translation/engines/{built}/translate", json=f"verse {i}")
                for i in range(3)
            ]
            held = [holder.expect("work"), holder.expect("work")]
            assert spare.expect("load_model").model.location == location, "the busy engine is spread"
            spare.ready(location)
            third = spare.expect("work")
            for node, item in [(holder, held[0]), (holder, held[1]), (spare, third)]:
                result = node_pb2.TranslationResult(translation=item.translate.segment.upper())
                node.send(
                    result=node_pb2.WorkResult(
                        request_id=item.request_id, translate=node_pb2.TranslateOutput(results=[result])
                    )
                )
            assert sorted(a.result(10).json()["translation"] for a in answers) == [
                "VERSE 0",
                "VERSE 1",
                "VERSE 2",
            ]
        states = {node_id: [m["state"] for m in n["models"]] for node_id, n in nodes_by_id(admin).items()}
        assert states == {"gpu-1": ["ready"], "gpu-2": ["ready"]}, "both nodes hold the hot engine"
    finally:
        holder.close()
        spare.close()


def test_a_failed_load_is_asked_again_after_the_retry_interval(tmp_path: Path, database_url: str) -> None:
    """The model store was down past the node's retry budget: the load failed, requests get a 503
    naming the failure, and once `api.failed_load_retry_s` has passed the node is asked again."""
    with fast_heartbeat_api(tmp_path, database_url, failed_load_retry_s=0.5) as api:
        engine_id = build_engine(api)
        node = ObedientNode(api.grpc_target, new_node_token(api), "gpu-1")
        translate = f"/translation/engines/{engine_id}/translate"
        try:
            node.keep_alive()
            with api.client() as client, ThreadPoolExecutor(1) as pool:
                answer = pool.submit(client.post, translate, json="a verse")
                load = node.expect("load_model").model
                node.send(
                    model_status=node_pb2.ModelStatus(
                        model=load,
                        state=node_pb2.MODEL_STATE_FAILED,
                        message="the model store was unreachable",
                    )
                )
                refused = answer.result(10)
                assert refused.status_code == 503 and "the model store was unreachable" in refused.text
                time.sleep(0.6)
                answer = pool.submit(client.post, translate, json="a verse")
                assert node.expect("load_model").model.location == load.location, "asked again"
                node.ready(load.location)
                item = node.expect("work")
                result = node_pb2.TranslationResult(translation="loaded at last")
                node.send(
                    result=node_pb2.WorkResult(
                        request_id=item.request_id, translate=node_pb2.TranslateOutput(results=[result])
                    )
                )
                assert answer.result(10).json()["translation"] == "loaded at last"
        finally:
            node.close()
