"""Train-segment for an engine family that learns segments (`smt-transfer`), with the test playing
the inference nodes over real gRPC: the pair is stored with an increasing number (`seq`) and the
number before it, every node of the replica holding the engine READY learns it before the request
returns, a node that did not (failed, away, loading) is told to catch up from the database rather
than unloaded, and `GetTrainSegments` hands a node loading a revision exactly the pairs trained
after that revision's build."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest

from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.service.keys import create_node_token, revoke_node_token
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_family_routing import (
    NMT,
    SMT,
    FamilyNode,
    api,
    built_engine,
    complete_build,
    first_work,
    in_background,
    node_token,
    nodes,
)
from tests.api.test_node_protocol import node_rows, wait_until

pytestmark = pytest.mark.database
__all__ = ["api", "node_token"]

SOURCE = "In the beginning was the Word."
TARGET = "Hapo mwanzo kulikuwako Neno."
PAIR = {"sourceSegment": SOURCE, "targetSegment": TARGET, "sentenceStart": True}


def train(client: httpx.Client, engine_id: str, source: str, target: str) -> httpx.Response:
    return client.post(
        f"/translation/engines/{engine_id}/train-segment",
        json={"sourceSegment": source, "targetSegment": target, "sentenceStart": True},
    )


def replay(api: RunningApi, token: str, location: str) -> list[tuple[str, str, int]]:
    stub = node_pb2_grpc.InferenceNodeApiStub(api.channel)
    response = stub.GetTrainSegments(
        node_pb2.GetTrainSegmentsRequest(model=node_pb2.ModelRef(location=location)),
        metadata=(("authorization", f"Bearer {token}"),),
    )
    return [(s.source_segment, s.target_segment, s.seq) for s in response.segments]


def replay_code(api: RunningApi, token: str, ref: node_pb2.ModelRef) -> grpc.StatusCode:
    stub = node_pb2_grpc.InferenceNodeApiStub(api.channel)
    with pytest.raises(grpc.RpcError) as error:
        stub.GetTrainSegments(
            node_pb2.GetTrainSegmentsRequest(model=ref), metadata=(("authorization", f"Bearer {token}"),)
        )
    code: grpc.StatusCode = error.value.code()
    return code


def test_every_node_holding_the_engine_learns_the_pair_before_the_request_returns(
    api: RunningApi, node_token: str
) -> None:
    with (
        api.client() as client,
        nodes(api, node_token, first=[NMT, SMT], second=[SMT], idle=[SMT], nmt_only=[NMT]) as [
            first,
            second,
            idle,
            nmt_only,
        ],
        ThreadPoolExecutor(1) as pool,
    ):
        engine_id = built_engine(api, client)
        for node in (first, second, nmt_only):
            node.ready(engine_id)
        path = f"/translation/engines/{engine_id}/train-segment"
        pair = {"sourceSegment": SOURCE, "targetSegment": TARGET, "sentenceStart": True}
        answer = in_background(pool, client, path, pair)
        learned = [first.work(), second.work()]
        ops = [item.train_segment for item in learned]
        assert {(op.source_segment, op.target_segment, op.sentence_start) for op in ops} == {
            (SOURCE, TARGET, True)
        }
        assert ops[0].seq == ops[1].seq > 0
        assert [item.model.location for item in learned] == [f"models/{engine_id}/1"] * 2
        first.learned(learned[0])
        assert not answer.done(), "the request waits for every node holding the engine"
        second.learned(learned[1])
        response = answer.result(timeout=20)
        assert response.status_code == 200 and response.content == b""
        seq = ops[0].seq

        again = in_background(pool, client, path, {**pair, "targetSegment": "Mwanzo kulikuwa na Neno."})
        retrained = [first.work(), second.work()]
        assert {item.train_segment.seq for item in retrained} == {retrained[0].train_segment.seq}
        assert retrained[0].train_segment.seq > seq, "a pair trained again gets a new number"
        for node, item in zip((first, second), retrained, strict=True):
            node.learned(item)
        assert again.result(timeout=20).status_code == 200
        assert replay(api, node_token, f"models/{engine_id}/1") == [
            (SOURCE, "Mwanzo kulikuwa na Neno.", retrained[0].train_segment.seq)
        ]

        translated = in_background(pool, client, f"/translation/engines/{engine_id}/translate", SOURCE)
        server, item = first_work([first, second])
        assert item.translate.segment == SOURCE, "an smt-transfer engine answers from its model"
        server.translated(item, "Kwanza kulikuwa na Neno.")
        assert translated.result(timeout=20).json()["translation"] == "Kwanza kulikuwa na Neno."
        assert idle.no_work(), "a node not holding the engine learns nothing"
        assert nmt_only.no_work(), "nor does a node not serving the engine's family"


def test_a_node_that_fails_to_learn_keeps_its_model_and_is_told_to_catch_up(
    api: RunningApi, node_token: str
) -> None:
    """Nothing is unloaded by the API service: the node that did not learn the pair is told to fetch
    what it lacks (its model stays served; a node whose model cannot learn unloads it itself)."""
    with (
        api.client() as client,
        nodes(api, node_token, good=[SMT], bad=[SMT]) as [good, bad],
        ThreadPoolExecutor(1) as pool,
    ):
        engine_id = built_engine(api, client)
        good.ready(engine_id, trained_through=0)
        bad.ready(engine_id, trained_through=0)
        answer = in_background(
            pool,
            client,
            f"/translation/engines/{engine_id}/train-segment",
            {"sourceSegment": SOURCE, "targetSegment": TARGET, "sentenceStart": True},
        )
        pushed = good.work()
        assert pushed.train_segment.previous_seq == 0, "the engine's first pair"
        good.result(
            pushed,
            train_segment=node_pb2.TrainSegmentOutput(
                seq=pushed.train_segment.seq, trained_through=pushed.train_segment.seq
            ),
        )
        bad.failed(bad.work(), node_pb2.WORK_ERROR_CODE_INTERNAL, "decoder broke")
        assert answer.result(timeout=20).status_code == 200, "the pair is stored whatever a node answers"
        catch_up = bad.next_other("catch_up").catch_up
        assert (catch_up.model.location, catch_up.through) == (
            f"models/{engine_id}/1",
            pushed.train_segment.seq,
        )
        assert not any(m.HasField("unload_model") for m in bad.others + good.others)
        good.ready(engine_id, trained_through=pushed.train_segment.seq)
        assert good.no_work() and not any(m.HasField("catch_up") for m in good.others)


def test_a_node_back_after_missing_a_pair_is_told_to_catch_up(api: RunningApi, node_token: str) -> None:
    """The record of what a node lacks is in the database, not in a replica's memory: a node that
    went away before it learned a pair, or that was away when it was trained, reports what its
    model has learned when it reconnects and is told to fetch the rest."""
    with api.client() as client, ThreadPoolExecutor(1) as pool:
        engine_id = built_engine(api, client)
        with nodes(api, node_token, flaky=[SMT]) as [node]:
            node.ready(engine_id, trained_through=0)
            answer = in_background(
                pool,
                client,
                f"/translation/engines/{engine_id}/train-segment",
                {"sourceSegment": SOURCE, "targetSegment": TARGET, "sentenceStart": True},
            )
            first = node.work().train_segment
            assert first.target_segment == TARGET
        assert answer.result(timeout=20).status_code == 200, "stored, though the node went away"
        assert train(client, engine_id, "While away.", "Akiwa mbali.").status_code == 200

        model = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")
        held = node_pb2.ModelStatus(model=model, state=node_pb2.MODEL_STATE_READY, trained_through=0)
        back = FamilyNode(api, node_token, "flaky", [SMT], models=(held,))
        try:
            catch_up = back.next_other("catch_up").catch_up
            assert catch_up.model.location == model.location
            assert catch_up.through > first.seq, "up to the pair trained while it was away"
            assert [s for _, _, s in replay(api, node_token, model.location)][-1] == catch_up.through
            assert not any(m.HasField("unload_model") for m in back.others)
        finally:
            back.close()
            wait_until(lambda: node_rows(api).get("flaky") == "gone")


def test_pairs_go_only_to_ready_models_and_never_start_or_stop_a_load(
    api: RunningApi, node_token: str
) -> None:
    """A model loading replays the pair when its load completes (then catches up on what it missed
    meanwhile); a failed one is neither sent the pair nor asked to load again."""
    with (
        api.client() as client,
        nodes(api, node_token, loading=[SMT], failed=[SMT], ahead=[SMT]) as [loading, failed, ahead],
    ):
        engine_id = built_engine(api, client)
        loading.ready(engine_id, state=node_pb2.MODEL_STATE_LOADING)
        failed.ready(engine_id, state=node_pb2.MODEL_STATE_FAILED)
        ahead.ready(engine_id, trained_through=10**12)
        wait_until(lambda: len(api_sessions_holding(api, engine_id)) == 3)
        assert train(client, engine_id, SOURCE, TARGET).status_code == 200
        for node in (loading, failed, ahead):
            assert node.no_work()
            assert not any(m.HasField("load_model") or m.HasField("unload_model") for m in node.others)
        [(_, _, seq)] = replay(api, node_token, f"models/{engine_id}/1")
        loading.ready(engine_id, trained_through=0)  # its replay read the database before the pair
        assert loading.next_other("catch_up").catch_up.through == seq


def api_sessions_holding(api: RunningApi, engine_id: str) -> list[str]:
    assert api.service.services is not None
    return [
        s.node_id
        for s in api.service.services.dispatcher.registry.sessions()
        if any(k.engine_id == engine_id for k in s.held())
    ]


def test_a_pushed_pair_carries_the_number_before_it(api: RunningApi, node_token: str) -> None:
    with (
        api.client() as client,
        nodes(api, node_token, learner=[SMT]) as [node],
        ThreadPoolExecutor(1) as pool,
    ):
        engine_id = built_engine(api, client)
        assert train(client, engine_id, "Before any node.", "Kabla ya nodi.").status_code == 200
        [(_, _, before)] = replay(api, node_token, f"models/{engine_id}/1")
        node.ready(engine_id, trained_through=before)
        answer = in_background(
            pool,
            client,
            f"/translation/engines/{engine_id}/train-segment",
            {"sourceSegment": SOURCE, "targetSegment": TARGET, "sentenceStart": True},
        )
        work = node.work()
        assert work.train_segment.previous_seq == before and work.train_segment.seq > before
        node.learned(work)
        assert answer.result(timeout=20).status_code == 200


def test_pairs_are_stored_without_nodes_and_replayed_after_the_revision_s_build(
    api: RunningApi, node_token: str
) -> None:
    with api.client() as client:
        engine_id = built_engine(api, client)
        other = built_engine(api, client)
        nmt = built_engine(api, client, "nmt")
        assert replay(api, node_token, f"models/{engine_id}/1") == []

        for source, target in (
            (SOURCE, TARGET),
            ("And the Word was with God.", "Naye Neno alikuwako kwa Mungu."),
        ):
            assert train(client, engine_id, source, target).status_code == 200
        assert train(client, other, "Other engine.", "Injini nyingine.").status_code == 200
        assert train(client, nmt, "Not replayed.", "Haitarudiwa.").status_code == 200
        first = replay(api, node_token, f"models/{engine_id}/1")
        assert [(s, t) for s, t, _ in first] == [
            (SOURCE, TARGET),
            ("And the Word was with God.", "Naye Neno alikuwako kwa Mungu."),
        ]
        assert first[0][2] < first[1][2]
        assert train(client, engine_id, SOURCE, "Hapo mwanzo alikuwako Neno.").status_code == 200
        retrained = replay(api, node_token, f"models/{engine_id}/1")
        assert [t for _, t, _ in retrained] == [
            "Naye Neno alikuwako kwa Mungu.",
            "Hapo mwanzo alikuwako Neno.",
        ]
        assert retrained[1][2] > first[1][2]

        complete_build(api, client, engine_id, {})
        build = client.get(f"/translation/engines/{engine_id}/builds").json()[-1]
        assert build["executionData"]["trainSegmentCount"] == 2
        assert replay(api, node_token, f"models/{engine_id}/2") == []
        assert train(client, engine_id, "Later.", "Baadaye.").status_code == 200
        [(source, target, seq)] = replay(api, node_token, f"models/{engine_id}/2")
        assert (source, target) == ("Later.", "Baadaye.") and seq > retrained[1][2]
        assert [s for s, _, _ in replay(api, node_token, f"models/{engine_id}/1")][-1] == "Later."
        assert replay(api, node_token, f"models/{other}/1") == [
            ("Other engine.", "Injini nyingine.", replay(api, node_token, f"models/{other}/1")[0][2])
        ]

        without_pairs = client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []})
        assert without_pairs.status_code == 201
        assert replay(api, node_token, f"models/{engine_id}/3") == replay(
            api, node_token, f"models/{engine_id}/1"
        ), (
            "a running build's revision (trained on no pairs) replays every pair: its completion has "
            "the nodes load it before it reads Completed"
        )
        canceled = client.post(f"/translation/engines/{engine_id}/current-build/cancel")
        assert canceled.status_code == 200, canceled.text
        missing = node_pb2.ModelRef(location=f"models/{engine_id}/3")
        assert replay_code(api, node_token, missing) == grpc.StatusCode.NOT_FOUND, (
            "revision 3 will never complete"
        )


def test_get_train_segments_checks_the_node_token_and_the_model(api: RunningApi, node_token: str) -> None:
    with api.client() as client:
        engine_id = built_engine(api, client)
        assert train(client, engine_id, SOURCE, TARGET).status_code == 200
        by_fields = node_pb2.ModelRef(engine_id=engine_id, revision=1)
        stub = node_pb2_grpc.InferenceNodeApiStub(api.channel)
        response = stub.GetTrainSegments(
            node_pb2.GetTrainSegmentsRequest(model=by_fields),
            metadata=(("authorization", f"Bearer {node_token}"),),
        )
        assert [s.source_segment for s in response.segments] == [SOURCE]

        location = node_pb2.ModelRef(location=f"models/{engine_id}/1")
        assert replay_code(api, "", location) == grpc.StatusCode.UNAUTHENTICATED
        assert replay_code(api, "node_not-a-real-token", location) == grpc.StatusCode.UNAUTHENTICATED
        assert api.service.services is not None
        record, revoked = api.run(create_node_token(api.service.services.db, "revoked"))
        api.run(revoke_node_token(api.service.services.db, record.id))
        assert replay_code(api, revoked, location) == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as error:
            stub.GetTrainSegments(node_pb2.GetTrainSegmentsRequest(model=location))
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED

        for bad in ("", "models/x", f"models/{engine_id}/one", f"builds/{engine_id}/1"):
            assert (
                replay_code(api, node_token, node_pb2.ModelRef(location=bad))
                == grpc.StatusCode.INVALID_ARGUMENT
            )
        mismatch = node_pb2.ModelRef(engine_id="another", location=f"models/{engine_id}/1")
        assert replay_code(api, node_token, mismatch) == grpc.StatusCode.INVALID_ARGUMENT
        unknown = node_pb2.ModelRef(location="models/000000000000000000000000/1")
        assert replay_code(api, node_token, unknown) == grpc.StatusCode.NOT_FOUND
        assert replay_code(api, node_token, node_pb2.ModelRef(location=f"models/{engine_id}/7")) == (
            grpc.StatusCode.NOT_FOUND
        )

        assert client.delete(f"/translation/engines/{engine_id}").status_code == 200
        assert replay_code(api, node_token, location) == grpc.StatusCode.NOT_FOUND


def test_an_unbuilt_or_foreign_engine_stores_nothing(api: RunningApi, node_token: str) -> None:
    with api.client() as client:
        unbuilt = create_engine(client, engine_type="smt-transfer")["id"]
        assert train(client, unbuilt, SOURCE, TARGET).status_code == 409
        engine_id = built_engine(api, client)
        with api.client(owner="owner-b") as other:
            assert train(other, engine_id, SOURCE, TARGET).status_code == 403
        assert train(client, engine_id, " ", TARGET).status_code == 400
        assert replay(api, node_token, f"models/{engine_id}/1") == []


def test_a_completing_build_has_its_revision_loaded_with_the_pairs_trained_meanwhile(
    api: RunningApi, node_token: str
) -> None:
    """Issue 35: the build's completion has the node serving the engine load the new revision
    before the build reads Completed; that load replays the pairs trained while the build ran
    (the build is still Active then)."""
    with (
        api.client() as client,
        nodes(api, node_token, node=[SMT]) as [node],
        ThreadPoolExecutor(1) as pool,
    ):
        engine_id = built_engine(api, client)
        node.ready(engine_id, trained_through=0)
        started = client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []})
        assert started.status_code == 201, started.text
        spec = api.launcher.specs[-1]
        job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
        auth = (("authorization", f"Bearer {spec.job_token}"),)
        job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=auth)
        trained = in_background(pool, client, f"/translation/engines/{engine_id}/train-segment", PAIR)
        node.learned(node.work())
        assert trained.result(timeout=20).status_code == 200

        completing = pool.submit(
            job.BuildCompleted, platform_pb2.BuildCompletedRequest(build_id=spec.build_id), metadata=auth
        )
        new = f"models/{engine_id}/2"
        assert node.next_other("load_model").load_model.model.location == new
        assert [(s, t) for s, t, _ in replay(api, node_token, new)] == [(SOURCE, TARGET)], (
            "the completing build's revision replays the pair trained while it ran"
        )
        assert (
            client.get(f"/translation/engines/{engine_id}/builds/{spec.build_id}").json()["state"] == "Active"
        )
        assert not completing.done(), "the build waits for the node's load"
        node.ready(engine_id, 2, trained_through=replay(api, node_token, new)[-1][2])
        completing.result(timeout=20)
        assert client.get(f"/translation/engines/{engine_id}/builds/{spec.build_id}").json()["state"] == (
            "Completed"
        )
        translated = in_background(pool, client, f"/translation/engines/{engine_id}/translate", SOURCE)
        item = node.work()
        assert item.model.location == new, "the first translate after Completed goes to the new revision"
        node.translated(item, TARGET)
        assert translated.result(timeout=20).headers["X-Model-Revision"] == "2"
