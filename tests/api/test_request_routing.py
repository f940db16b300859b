"""Request routing's decisions (`serval_api/routing/request_routing.py`) over in-memory node sessions:
which node one translate goes to, and the typed error when none can take it. The sessions are real
`NodeSession`s with no node behind them; the test plays the nodes by answering the work item that
lands in a session's outbox (`session.resolve`), and reads the load orders left there."""

from __future__ import annotations

import asyncio

import pytest

from serval.inference.v1 import node_pb2
from serval_api.errors import NotFound, Unavailable
from serval_api.routing.held import READY
from serval_api.routing.placement import Placement
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.request_routing import RequestRouter
from serval_api.routing.session import NodeSession, model_ref
from serval_api.routing.work import TranslateWork
from serval_common.model_revision import ModelRevision
from serval_common.settings import Settings

ENGINE = "e" * 24
REV1 = ModelRevision(ENGINE, 1)
REV2 = ModelRevision(ENGINE, 2)
NMT = "nmt"
SMT = "smt-transfer"


def node(
    name: str,
    *,
    slots: int = 4,
    busy: int = 0,
    ready: tuple[ModelRevision, ...] = (),
    families: frozenset[str] = frozenset({NMT}),
    draining: bool = False,
) -> NodeSession:
    """A node session serving `families`, with `busy` of its `slots` taken and `ready` revisions loaded."""
    session = NodeSession(
        session_id=name,
        node_id=name,
        device=node_pb2.DeviceInfo(),
        slots=slots,
        busy_elsewhere=busy,
        families=families,
        draining=draining,
    )
    for model in ready:
        session.models.set(model.location, READY, model.weights)
    return session


def router(*sessions: NodeSession) -> RequestRouter:
    registry = NodeRegistry()
    for session in sessions:
        asyncio.run(registry.add(session))
    settings = Settings()
    return RequestRouter(registry, settings, Placement(registry, settings))


def loads(session: NodeSession) -> list[str]:
    """The load orders the node was sent (other messages and work items dropped)."""
    orders = []
    while not session.outbox.empty():
        message = session.outbox.get_nowait()
        if isinstance(message, node_pb2.ApiMessage) and message.HasField("load_model"):
            orders.append(message.load_model.model.location)
    return orders


async def answer_one(sessions: tuple[NodeSession, ...]) -> tuple[str, str]:
    """Play the nodes: answer the first work item sent to any of them, leaving their other
    messages queued; (node id, revision location it was sent for)."""
    while True:
        for session in sessions:
            queued = [session.outbox.get_nowait() for _ in range(session.outbox.qsize())]
            work = next((m for m in queued if isinstance(m, node_pb2.WorkItem)), None)
            for message in queued:
                if message is not work:
                    session.outbox.put_nowait(message)
            if work is not None:
                result = node_pb2.TranslationResult(translation="done", source_tokens=["x"])
                session.resolve(
                    node_pb2.WorkResult(
                        request_id=work.request_id, translate=node_pb2.TranslateOutput(results=[result])
                    )
                )
                return session.node_id, work.model.location
        await asyncio.sleep(0.001)


def translate(model: ModelRevision, *sessions: NodeSession, family: str = NMT) -> tuple[str, str]:
    """Route one translate of `model` through a router over `sessions`, answered by whichever node
    gets it; (node id, revision location it was sent for)."""
    routing = router(*sessions)
    work = TranslateWork(model, family, "en", "sw", "text")

    async def run() -> tuple[str, str]:
        request = asyncio.ensure_future(routing.translate(work, request_id="r1", timeout_s=2))
        answered = asyncio.ensure_future(answer_one(sessions))
        await asyncio.wait([request, answered], return_when=asyncio.FIRST_COMPLETED)
        if request.done() and not answered.done():
            answered.cancel()
            request.result()  # raises the routing error
        served = await request
        where = await answered
        assert ModelRevision.parse(where[1]) == ModelRevision(ENGINE, served.revision)
        return where

    return asyncio.run(run())


def test_the_node_holding_the_revision_goes_before_an_idle_one_that_would_have_to_load_it() -> None:
    holding = node("holding", busy=1, ready=(REV1,))
    idle = node("idle")
    assert translate(REV1, idle, holding) == ("holding", REV1.location)
    assert loads(idle) == [] and loads(holding) == []


def test_a_hot_node_still_takes_the_work_while_an_idle_one_is_told_to_load_it_too() -> None:
    """Past `api.spread_load_fraction` (half its slots) the model spreads; the work does not wait."""
    hot = node("hot", busy=2, ready=(REV1,))
    idle = node("idle")
    assert translate(REV1, idle, hot) == ("hot", REV1.location)
    assert loads(idle) == [REV1.location]


def test_of_the_nodes_holding_it_the_least_loaded_takes_the_work() -> None:
    busy = node("busy", busy=3, ready=(REV1,))
    quiet = node("quiet", slots=8, busy=3, ready=(REV1,))
    assert translate(REV1, busy, quiet) == ("quiet", REV1.location)


def test_a_full_or_draining_node_holding_it_is_skipped() -> None:
    full = node("full", slots=2, busy=2, ready=(REV1,))
    draining = node("draining", ready=(REV1,), draining=True)
    free = node("free", busy=3, ready=(REV1,))
    assert translate(REV1, full, draining, free) == ("free", REV1.location)


def test_a_node_holding_the_weights_under_another_revision_serves_without_a_load() -> None:
    """An inference-only build of a loaded base model: its weights are ready already."""
    base = ModelRevision("b" * 24, 1, "w-base")
    holding = node("holding", ready=(base,))
    idle = node("idle")
    assert translate(REV1.with_weights("w-base"), idle, holding) == ("holding", REV1.location)
    assert loads(idle) == []


def test_during_a_hot_swap_the_older_revision_serves_while_a_node_loads_the_new_one() -> None:
    old = node("old", ready=(REV1,))
    assert translate(REV2, old) == ("old", REV1.location)
    assert loads(old) == [REV2.location]


def test_an_engine_family_goes_only_to_nodes_serving_it() -> None:
    nmt = node("nmt", ready=(REV1,))
    smt = node("smt", busy=3, families=frozenset({SMT}), ready=(REV1,))
    assert translate(REV1, nmt, smt, family=SMT) == ("smt", REV1.location)

    with pytest.raises(Unavailable, match="no inference node serving smt-transfer engines is connected"):
        translate(REV1, node("nmt-only", ready=(REV1,)), family=SMT)


def test_no_node_at_all_or_only_draining_ones_is_the_typed_error() -> None:
    with pytest.raises(Unavailable, match="no inference node serving nmt engines is connected"):
        translate(REV1)
    with pytest.raises(Unavailable, match="every inference node is draining"):
        translate(REV1, node("draining", ready=(REV1,), draining=True))


def test_a_node_that_must_load_it_first_is_asked_and_the_request_waits_for_the_load() -> None:
    loader = node("loader")
    routing = router(loader)
    work = TranslateWork(REV1, NMT, "en", "sw", "text")

    async def run() -> tuple[str, str]:
        request = asyncio.ensure_future(routing.translate(work, request_id="r1", timeout_s=2))
        while not loads(loader):
            await asyncio.sleep(0.001)
        routing.registry.set_model_state(loader, node_pb2.ModelStatus(model=model_ref(REV1), state=READY))
        await routing.registry.notify()
        where = await answer_one((loader,))
        await request
        return where

    assert asyncio.run(run()) == ("loader", REV1.location)


def test_an_engine_being_deleted_is_not_found() -> None:
    """While placement retires the engine (its nodes unloading it), a request for it is 404."""
    holding = node("holding", ready=(REV1,))
    routing = router(holding)
    work = TranslateWork(REV1, NMT, "en", "sw", "text")

    async def run() -> None:
        retiring = asyncio.ensure_future(routing.placement.retire_engine(ENGINE, timeout_s=2))
        await asyncio.sleep(0)
        assert routing.placement.retiring(ENGINE)
        try:
            with pytest.raises(NotFound, match=f"engine {ENGINE} not found"):
                await routing.translate(work, request_id="r1", timeout_s=1)
        finally:
            retiring.cancel()

    asyncio.run(run())
