"""Routing by engine family, with the test playing the inference nodes over real gRPC (the node
protocol's Hello claims the families a node serves): work for an `smt-transfer` engine reaches
only nodes claiming that family, an older node that claims none serves `nmt` alone, and an
operation the node's family lacks (UNIMPLEMENTED) answers 405."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import pytest

from serval.inference.v1 import node_pb2
from serval.translation.v1 import engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_node_protocol import ScriptedNode, new_node_token, node_rows, wait_until
from tests.helpers import fresh_database

pytestmark = pytest.mark.database

NMT = node_pb2.ENGINE_FAMILY_NMT
SMT = node_pb2.ENGINE_FAMILY_SMT_TRANSFER


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    """One API service for the module (each test uses engines and nodes of its own), expecting
    heartbeats every 0.2 s."""
    home = tmp_path_factory.mktemp("api")
    with fresh_database(home) as url:
        settings = Settings(
            home=home,
            database_url=url,
            api=ApiSettings(
                host="127.0.0.1", grpc_port=0, rest_port=0, heartbeat_interval_s=0.2, request_timeout_s=20
            ),
        )
        running = RunningApi(settings)
        try:
            yield running
        finally:
            running.close()


@pytest.fixture(scope="module")
def node_token(api: RunningApi) -> str:
    return new_node_token(api)


class FamilyNode(ScriptedNode):
    """A node whose Hello claims `families` (None: an older node's Hello, without the field)."""

    def __init__(
        self,
        api: RunningApi,
        token: str,
        node_id: str,
        families: list[int] | None,
        models: tuple[node_pb2.ModelStatus, ...] = (),
    ) -> None:
        super().__init__(api.grpc_target, token)
        self.node_id = node_id
        self.others: list[node_pb2.ApiMessage] = []
        """What the node received besides work items (load and unload orders)."""
        self.send(
            hello=node_pb2.Hello(
                protocol_version=node_pb2.PROTOCOL_VERSION_2,
                node_id=node_id,
                device=node_pb2.DeviceInfo(kind="cpu", compute_type="int8"),
                free_slots=4,
                slots=4,
                families=families or [],
                models=models,
            )
        )
        assert self.read().HasField("welcome")
        self.keep_alive()

    def ready(
        self,
        engine_id: str,
        revision: int = 1,
        *,
        trained_through: int | None = None,
        state: int = node_pb2.MODEL_STATE_READY,
    ) -> None:
        """Report the revision READY (or `state`); with `trained_through`, as a node of this release
        reports a model that learns segments."""
        model = node_pb2.ModelRef(
            engine_id=engine_id, revision=revision, location=f"models/{engine_id}/{revision}"
        )
        self.send(
            model_status=node_pb2.ModelStatus(model=model, state=state, trained_through=trained_through)
        )

    def work(self, timeout_s: float = 10) -> node_pb2.WorkItem:
        """The next work item; load and unload orders before it are kept in `others`."""
        while True:
            message = self.read(timeout_s)
            if message.HasField("work"):
                return message.work
            self.others.append(message)

    def no_work(self) -> bool:
        """Whether nothing the node received so far is a work item."""
        with contextlib.suppress(queue.Empty):
            while True:
                message = self.read(timeout_s=0.05)
                if message.HasField("work"):
                    return False
                self.others.append(message)
        return True

    def result(self, item: node_pb2.WorkItem, **outcome: Any) -> None:
        self.send(result=node_pb2.WorkResult(request_id=item.request_id, **outcome))

    def translated(self, item: node_pb2.WorkItem, text: str) -> None:
        results = [node_pb2.TranslationResult(translation=text)] * max(1, item.translate.n)
        self.result(item, translate=node_pb2.TranslateOutput(results=results))

    def learned(self, item: node_pb2.WorkItem) -> None:
        self.result(item, train_segment=node_pb2.TrainSegmentOutput(seq=item.train_segment.seq))

    def next_other(self, kind: str, timeout_s: float = 15) -> node_pb2.ApiMessage:
        """The next message of `kind` (e.g. `catch_up`) that is not a work item; work items before it
        fail the test."""
        for message in self.others:
            if message.HasField(kind):  # type: ignore[arg-type]
                self.others.remove(message)
                return message
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {kind} within {timeout_s:g} s; received {self.others}"
            message = self.read(remaining)
            assert not message.HasField("work"), f"work instead of {kind}: {message}"
            if message.HasField(kind):  # type: ignore[arg-type]
                return message
            self.others.append(message)

    def failed(self, item: node_pb2.WorkItem, code: int, message: str) -> None:
        self.result(item, error=node_pb2.WorkError(code=code, message=message))


@contextlib.contextmanager
def nodes(api: RunningApi, token: str, **families: list[int] | None) -> Iterator[list[FamilyNode]]:
    """Connected nodes named by the keywords; afterwards, gone from routing before the next test."""
    started: list[FamilyNode] = []
    try:
        for node_id, claimed in families.items():
            started.append(FamilyNode(api, token, node_id, claimed))
        wait_until(lambda: all(node_rows(api).get(n.node_id) == "connected" for n in started))
        yield started
    finally:
        for node in started:
            node.close()
        wait_until(lambda: all(node_rows(api).get(n.node_id) == "gone" for n in started))


def complete_build(api: RunningApi, client: httpx.Client, engine_id: str, body: dict[str, Any]) -> str:
    """Start a build and complete it as its job would (through the platform API); its id."""
    started = client.post(f"/translation/engines/{engine_id}/builds", json=body)
    assert started.status_code == 201, started.text
    build_id: str = started.json()["id"]
    spec = api.launcher.specs[-1]
    assert spec.build_id == build_id
    job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    auth = (("authorization", f"Bearer {spec.job_token}"),)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=build_id), metadata=auth)
    job.BuildCompleted(platform_pb2.BuildCompletedRequest(build_id=build_id), metadata=auth)
    return build_id


def built_engine(api: RunningApi, client: httpx.Client, engine_type: str = "smt-transfer") -> str:
    engine_id: str = create_engine(client, engine_type=engine_type)["id"]
    complete_build(api, client, engine_id, {"trainOn": []})
    assert client.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 1
    return engine_id


def in_background(
    pool: ThreadPoolExecutor, client: httpx.Client, path: str, body: Any
) -> Future[httpx.Response]:
    return pool.submit(client.post, path, json=body)


def test_smt_work_never_goes_to_nodes_that_do_not_claim_the_family(api: RunningApi, node_token: str) -> None:
    with api.client() as client, nodes(api, node_token, nmt_only=[NMT], older=None) as [nmt_only, older]:
        smt = built_engine(api, client)
        nmt = built_engine(api, client, "nmt")
        for node in (nmt_only, older):
            node.ready(smt)
        refused = client.post(f"/translation/engines/{smt}/translate", json="In the beginning")
        assert refused.status_code == 503
        assert "no inference node serving smt-transfer engines" in refused.json()["message"]
        for path, body in (
            ("get-word-graph", "In the beginning"),
            ("translate-prefix", {"segment": "In the beginning", "prefix": "Hapo"}),
        ):
            assert client.post(f"/translation/engines/{smt}/{path}", json=body).status_code == 503
        assert nmt_only.no_work() and older.no_work()

        with ThreadPoolExecutor(1) as pool:
            for node in (nmt_only, older):
                node.ready(nmt)
            answer = in_background(pool, client, f"/translation/engines/{nmt}/translate", "In the beginning")
            server, item = first_work([nmt_only, older])
            assert item.model.location == f"models/{nmt}/1"
            server.translated(item, "Hapo mwanzo")
            assert answer.result(timeout=20).json()["translation"] == "Hapo mwanzo"


def first_work(candidates: list[FamilyNode]) -> tuple[FamilyNode, node_pb2.WorkItem]:
    for _ in range(200):
        for node in candidates:
            with contextlib.suppress(queue.Empty):
                message = node.read(timeout_s=0.05)
                if message.HasField("work"):
                    return node, message.work
                node.others.append(message)
    raise AssertionError("no node received the work item")


def test_a_node_claiming_smt_serves_every_translation_operation(api: RunningApi, node_token: str) -> None:
    with api.client() as client, nodes(api, node_token, nmt_node=[NMT], both=[NMT, SMT]) as [nmt_node, both]:
        engine_id = built_engine(api, client)
        base = f"/translation/engines/{engine_id}"
        with ThreadPoolExecutor(1) as pool:
            answer = in_background(pool, client, f"{base}/translate/2", "In the beginning")
            assert both.read().load_model.model.location == f"models/{engine_id}/1"
            both.ready(engine_id)
            item = both.work()
            assert item.model.location == f"models/{engine_id}/1"
            assert (item.translate.segment, item.translate.n) == ("In the beginning", 2)
            both.translated(item, "Hapo mwanzo")
            response = answer.result(timeout=20)
            assert response.status_code == 200, response.text
            assert [r["translation"] for r in response.json()] == ["Hapo mwanzo"] * 2
            assert response.headers["X-Model-Revision"] == "1"

            prefix = {"segment": "In the beginning", "prefix": "Hapo", "n": 1}
            answer = in_background(pool, client, f"{base}/translate-prefix", prefix)
            item = both.work()
            assert (item.translate.segment, item.translate.target_prefix) == ("In the beginning", "Hapo")
            both.translated(item, "Hapo mwanzo")
            assert answer.result(timeout=20).json()[0]["translation"] == "Hapo mwanzo"

            answer = in_background(pool, client, f"{base}/get-word-graph", "In the beginning")
            item = both.work()
            assert item.word_graph.segment == "In the beginning"
            graph = node_pb2.WordGraph(source_tokens=["In", "the", "beginning"], initial_state_score=-1.5)
            both.result(item, word_graph=graph)
            body = answer.result(timeout=20).json()
            assert body["sourceTokens"] == ["In", "the", "beginning"] and body["initialStateScore"] == -1.5

            stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
            request = engine_pb2.GetWordGraphRequest(
                engine_type="SmtTransfer", engine_id=engine_id, segment="In the beginning"
            )
            call = pool.submit(stub.GetWordGraph, request, metadata=(("x-api-key", api.api_key()),))
            item = both.work()
            both.result(item, word_graph=graph)
            assert list(call.result(timeout=20).word_graph.source_tokens) == ["In", "the", "beginning"]
        assert nmt_node.no_work()


def test_an_operation_the_family_lacks_answers_405(api: RunningApi, node_token: str) -> None:
    with api.client() as client, nodes(api, node_token, lacking=[SMT]) as [node]:
        engine_id = built_engine(api, client)
        node.ready(engine_id)
        stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
        with ThreadPoolExecutor(1) as pool:
            answer = in_background(pool, client, f"/translation/engines/{engine_id}/get-word-graph", "Word")
            node.failed(
                node.work(), node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED, "a smt-transfer engine cannot do that"
            )
            response = answer.result(timeout=20)
            assert response.status_code == 405
            assert "cannot do that" in response.json()["message"]

            request = engine_pb2.TranslateRequest(
                engine_type="SmtTransfer", engine_id=engine_id, segment="Word"
            )
            call = pool.submit(stub.Translate, request, metadata=(("x-api-key", api.api_key()),))
            node.failed(node.work(), node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED, "cannot translate")
            with pytest.raises(grpc.RpcError) as error:
                call.result(timeout=20)
            assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
