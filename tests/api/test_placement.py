"""Placement's decisions (`serval_api/routing/placement.py`) over in-memory node sessions: which node
is asked to load a revision, which stands in during a hot swap, when a hot model spreads, and what a
node's READY supersedes. The sessions are real `NodeSession`s with no node behind them: what the
API service would send a node stays in its outbox, where the tests read it."""

from __future__ import annotations

import asyncio
import time

import pytest

from serval.inference.v1 import node_pb2
from serval_api.errors import Unavailable
from serval_api.routing.held import FAILED, LOADING, READY
from serval_api.routing.placement import Placement, newest_older
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeSession, model_ref
from serval_common.model_revision import ModelRevision
from serval_common.settings import ApiSettings, Settings

ENGINE = "e" * 24
OTHER_ENGINE = "f" * 24
REV1 = ModelRevision(ENGINE, 1)
REV2 = ModelRevision(ENGINE, 2)


def node(
    name: str,
    *,
    slots: int = 4,
    busy: int = 0,
    held: dict[ModelRevision, int] | None = None,
    memory_free_bytes: int = 0,
    draining: bool = False,
) -> NodeSession:
    """A node session with `busy` of its `slots` taken and `held` revisions in the given states."""
    session = NodeSession(
        session_id=name, node_id=name, device=node_pb2.DeviceInfo(), slots=slots, busy_elsewhere=busy
    )
    for model, state in (held or {}).items():
        session.models.set(model.location, state, model.weights)
    session.memory_free_bytes = memory_free_bytes
    session.draining = draining
    return session


def sent(session: NodeSession) -> list[str]:
    """What the API service told the node so far, as `load <location>` / `unload <location>`."""
    orders = []
    while not session.outbox.empty():
        message = session.outbox.get_nowait()
        assert isinstance(message, node_pb2.ApiMessage)
        if message.HasField("load_model"):
            orders.append(f"load {message.load_model.model.location}")
        elif message.HasField("unload_model"):
            orders.append(f"unload {message.unload_model.model.location}")
    return orders


def placement(*sessions: NodeSession, spread: float = 0.5) -> Placement:
    registry = NodeRegistry()
    for session in sessions:
        asyncio.run(registry.add(session))
    return Placement(registry, Settings(api=ApiSettings(spread_load_fraction=spread)))


# ---- request_load: which node loads a revision nobody holds ----------------------------------


def test_a_node_replacing_an_older_revision_of_the_engine_loads_the_new_one() -> None:
    idle = node("idle")
    replacing = node("replacing", busy=3, held={REV1: READY})
    placement(idle, replacing).request_load(REV2, [idle, replacing])
    assert sent(replacing) == [f"load {REV2.location}"]
    assert sent(idle) == []
    assert replacing.model_state(REV2.location) == LOADING


def test_a_node_with_memory_for_the_model_goes_before_a_less_loaded_one_without() -> None:
    """The model's size as another node (here a draining one) reported it."""
    reported = node("reported", draining=True)
    reported.models.set(REV1.location, READY, "w-big", size_bytes=1000)
    full = node("full", memory_free_bytes=10)
    roomy = node("roomy", busy=2, memory_free_bytes=2000)
    sessions = [reported, full, roomy]
    placement(*sessions).request_load(REV1.with_weights("w-big"), sessions)
    assert sent(roomy) == [f"load {REV1.location}"]
    assert sent(full) == []


def test_the_least_loaded_node_loads_then_the_one_holding_fewest_models() -> None:
    busy = node("busy", busy=2)
    quiet = node("quiet", busy=1)
    placement(busy, quiet).request_load(REV1, [busy, quiet])
    assert sent(quiet) == [f"load {REV1.location}"] and sent(busy) == []

    crowded = node("crowded", held={ModelRevision(OTHER_ENGINE, 1): READY})
    empty = node("empty")
    placement(crowded, empty).request_load(REV1, [crowded, empty])
    assert sent(empty) == [f"load {REV1.location}"] and sent(crowded) == []


def test_a_draining_node_is_never_asked_to_load() -> None:
    draining = node("draining", held={REV1: READY}, draining=True)
    other = node("other", busy=3)
    placement(draining, other).request_load(REV2, [draining, other])
    assert sent(other) == [f"load {REV2.location}"] and sent(draining) == []

    with pytest.raises(Unavailable, match=f"no inference node could load model {REV2.location}: draining"):
        placement(draining).request_load(REV2, [draining])


def test_a_node_whose_load_failed_is_asked_again_only_after_the_retry_interval() -> None:
    failed = node("failed", held={REV1: FAILED})
    failed.model_errors[REV1.location] = "checksum mismatch"
    failed.failed_at[REV1.location] = time.monotonic()
    places = placement(failed)
    with pytest.raises(
        Unavailable, match=f"no inference node could load model {REV1.location}: checksum mismatch"
    ):
        places.request_load(REV1, [failed])

    failed.failed_at[REV1.location] = time.monotonic() - places.settings.api.failed_load_retry_s - 1
    places.request_load(REV1, [failed])
    assert sent(failed) == [f"load {REV1.location}"]


# ---- newest_older: the hot swap's stand-in --------------------------------------------------


def test_the_newest_older_ready_revision_stands_in_least_loaded_first() -> None:
    rev0 = node("rev0", held={ModelRevision(ENGINE, 0): READY})
    rev1_busy = node("rev1-busy", busy=3, held={REV1: READY})
    rev1_quiet = node("rev1-quiet", busy=1, held={REV1: READY})
    rev1_loading = node("rev1-loading", held={REV1: LOADING})
    choice = newest_older(ModelRevision(ENGINE, 3), [rev0, rev1_busy, rev1_quiet, rev1_loading])
    assert choice == (rev1_quiet, REV1)


def test_no_stand_in_on_a_full_node_or_for_another_engine() -> None:
    full = node("full", slots=2, busy=2, held={REV1: READY})
    other = node("other", held={ModelRevision(OTHER_ENGINE, 1): READY})
    assert newest_older(REV2, [full, other]) is None


# ---- spreading a hot model ------------------------------------------------------------------


def test_a_hot_model_spreads_to_one_more_node() -> None:
    hot = node("hot", busy=2, held={REV1: READY})
    spare = node("spare", busy=1)
    idle = node("idle")
    places = placement(hot, spare, idle)
    places.spread_if_hot(REV1, [hot, spare, idle], [hot])
    assert sent(idle) == [f"load {REV1.location}"] and sent(spare) == []

    places.spread_if_hot(REV1, [hot, spare, idle], [hot])
    assert sent(spare) == [], "a node loading it already: no other is asked meanwhile"


def test_a_model_below_the_spread_fraction_or_with_spreading_off_stays_put() -> None:
    warm = node("warm", busy=1, held={REV1: READY})
    idle = node("idle")
    placement(warm, idle).spread_if_hot(REV1, [warm, idle], [warm])
    hot = node("hot", busy=4, held={REV1: READY})
    placement(hot, idle, spread=0).spread_if_hot(REV1, [hot, idle], [hot])
    assert sent(idle) == []


# ---- what a node's READY supersedes ---------------------------------------------------------


def test_a_new_revision_ready_on_one_node_unloads_older_ones_everywhere() -> None:
    old_here = node("here", held={REV1: READY, REV2: LOADING})
    old_there = node("there", held={REV1: READY})
    places = placement(old_here, old_there)
    places.registry.set_model_state(old_here, node_pb2.ModelStatus(model=model_ref(REV2), state=READY))
    assert sent(old_here) == [f"unload {REV1.location}"]
    assert sent(old_there) == [f"unload {REV1.location}"]
    assert places.current(REV1) == REV2, "a request for the old revision is served by the new one"


def test_a_published_revision_is_loaded_ahead_by_the_nodes_serving_the_engine_only() -> None:
    serving = node("serving", held={REV1: READY})
    unrelated = node("unrelated", held={ModelRevision(OTHER_ENGINE, 1): READY})
    draining = node("draining", held={REV1: READY}, draining=True)
    placement(serving, unrelated, draining).revision_published(ENGINE, 2)
    assert sent(serving) == [f"load {REV2.location}"]
    assert sent(unrelated) == [] and sent(draining) == []
