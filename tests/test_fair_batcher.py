"""Owner-fair, latency-bounded batch formation on the node (issue 37): the micro-batcher's queue
policy (`inference_gpu/fair_queue.py`) and latency cap (`inference_gpu/batcher.py`) with a synthetic
backend whose cost grows with the batch (2 ms a request, like a model on a CPU), and the API
service's side: who sent the work travels on every work item it sends a node.

Batch compositions are made deterministic by holding the first batch at a gate while the rest
queue; the tests assert orders and compositions, never durations.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from inference_gpu.batcher import BatchCosts, MicroBatcher
from inference_gpu.fair_queue import FairQueue, weight_of
from inference_gpu.families.nmt.backends import TranslateRequest
from inference_gpu.metrics import NodeMetrics
from inference_gpu.work_runner import _run_operation
from serval.inference.v1 import node_pb2
from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import EngineRow
from serval_api.routing.request_routing import work_item
from serval_api.routing.work import Served, TranslateWork, WordGraphWork
from serval_api.service import text_translation, translation
from serval_api.service.context import Services
from serval_api.service.lookups import EngineRecord
from serval_common.core import UNKNOWN_SENDER, Sender, WordGraph, WorkClass, work_class
from serval_common.model_revision import ModelRevision
from serval_common.node_codec import sender_of
from serval_common.settings import ApiSettings, NodeSettings, Settings

A = Sender("owner-a", "key-a")
B = Sender("owner-b", "key-b")
B_BULK = Sender("owner-b", "key-b", WorkClass.BULK)
C = Sender("owner-c")
Z = Sender("owner-z")


@dataclass(frozen=True)
class Job:
    """A request to the synthetic backend: a name to follow it by, its sender and decoding key."""

    name: str
    sender: Sender = UNKNOWN_SENDER
    key: tuple[int, int] = (1, 4)


class Backend:
    """Costs 2 ms a request (or `per_request_s`); holds its first call until `gate` is set, so the
    requests sent meanwhile all queue; remembers each batch's names."""

    def __init__(self, per_request_s: float = 0.002, *, gated: bool = True) -> None:
        self.per_request_s = per_request_s
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.calls: list[list[str]] = []

    def __call__(self, batch: list[Job]) -> list[str]:
        if not self.calls:
            self.gate.wait(30)
        self.calls.append([job.name for job in batch])
        time.sleep(self.per_request_s * len(batch))
        return [job.name for job in batch]

    @property
    def sizes(self) -> list[int]:
        return [len(call) for call in self.calls]


def jobs(prefix: str, sender: Sender, count: int, start: int = 1, key: tuple[int, int] = (1, 4)) -> list[Job]:
    return [Job(f"{prefix}{i}", sender, key) for i in range(start, start + count)]


def run_queued(batcher: MicroBatcher[Job, str], backend: Backend, first: Job, queued: list[Job]) -> None:
    """`first` runs alone at the idle model, held at the gate while `queued` queue in this order;
    then everything is answered."""

    async def run() -> None:
        running = asyncio.ensure_future(batcher.submit(first))
        await asyncio.sleep(0)
        waiting = []
        for job in queued:
            waiting.append(asyncio.ensure_future(batcher.submit(job)))
            await asyncio.sleep(0)
        assert batcher.stats.calls == 1, "only the first request runs; the rest queue behind it"
        backend.gate.set()
        answers = await asyncio.gather(running, *waiting)
        assert answers == [first.name, *(job.name for job in queued)]
        await batcher.close()

    asyncio.run(run())


def owners(call: list[str]) -> str:
    """A batch as the owners' letters of its requests, in order: "abab…"."""
    return "".join(name[0] for name in call)


# ---- owners take turns ---------------------------------------------------------------------


def test_a_new_owners_request_goes_into_the_next_batch_beside_a_deep_backlog() -> None:
    backend = Backend()
    batcher: MicroBatcher[Job, str] = MicroBatcher(backend, max_batch_size=8, max_wait_ms=5)
    run_queued(batcher, backend, Job("b0", B), [*jobs("b", B, 40), Job("a1", A)])
    assert backend.calls[1] == ["b1", "a1", "b2", "b3", "b4", "b5", "b6", "b7"], (
        "a's one request takes the second place of the next batch, not the end of b's 40"
    )
    assert backend.sizes == [1, 8, 8, 8, 8, 8, 1]


@pytest.mark.parametrize("sender", [B, UNKNOWN_SENDER], ids=["one-owner", "no-owner"])
def test_an_owner_alone_gets_full_batches_first_come_first_served(sender: Sender) -> None:
    """Work-conserving: an owner alone takes every slot, as every request did before owners were
    known (an API service of an earlier release sends none: one owner, "")."""
    backend = Backend()
    batcher: MicroBatcher[Job, str] = MicroBatcher(backend, max_batch_size=8, max_wait_ms=5)
    queued = jobs("b", sender, 32)
    run_queued(batcher, backend, Job("b0", sender), queued)
    assert backend.sizes == [1, 8, 8, 8, 8]
    assert [name for call in backend.calls[1:] for name in call] == [job.name for job in queued]


@pytest.mark.parametrize(
    ("weights", "sender_a"),
    [
        ({"owner:owner-a": 2.0}, A),
        ({"key:key-a": 2.0, "owner:owner-a": 0.5}, A),  # the key's own weight wins over its owner's
    ],
    ids=["owner-weight", "key-weight"],
)
def test_weights_change_the_shares_exactly(weights: dict[str, float], sender_a: Sender) -> None:
    """Deficit round robin: weight 2 beside weight 1 takes 2 of every 3 slots, in every batch while
    both owners have a backlog; then the one left takes whole batches."""
    backend = Backend()
    batcher: MicroBatcher[Job, str] = MicroBatcher(backend, max_batch_size=6, max_wait_ms=5, weights=weights)
    interleaved = [
        job for pair in zip(jobs("a", sender_a, 60), jobs("b", B, 60), strict=True) for job in pair
    ]
    run_queued(batcher, backend, Job("z0", Z), interleaved)
    shared = backend.calls[1:16]
    assert [owners(call) for call in shared] == ["aabaab"] * 15
    assert sum(owners(call).count("a") for call in shared) == 2 * 15 * 6 // 3
    assert [owners(call) for call in backend.calls[16:]] == ["bbbbbb"] * 5


def test_weights_are_read_when_turns_are_taken() -> None:
    weights: dict[str, float] = {}
    assert weight_of(weights, A) == 1.0
    weights["owner:owner-a"] = 3.0
    assert weight_of(weights, A) == 3.0
    weights["key:key-a"] = 0.5
    assert weight_of(weights, A) == 0.5
    assert weight_of(weights, Sender("owner-a")) == 3.0, "a JWT's request: its owner's weight"
    weights["owner:owner-a"] = 0.0
    assert weight_of(weights, Sender("owner-a")) > 0, "a turn always ends"


# ---- interactive before bulk ---------------------------------------------------------------


def test_interactive_requests_pass_bulk_ones() -> None:
    """b's long text (bulk) queued first; interactive requests of c and of b itself arrive after it
    and fill the next batch first."""
    backend = Backend()
    batcher: MicroBatcher[Job, str] = MicroBatcher(backend, max_batch_size=8, max_wait_ms=5)
    queued = [*jobs("t", B_BULK, 20), *jobs("c", C, 2), Job("b1", B)]
    run_queued(batcher, backend, Job("z0", Z), queued)
    assert backend.calls[1] == ["c1", "b1", "c2", "t1", "t2", "t3", "t4", "t5"]
    assert backend.sizes == [1, 8, 8, 7]


@dataclass
class Waiting:
    sender: Sender
    queued_at: float = 0.0
    gone: bool = False


def test_bulk_work_is_never_starved_by_interactive_work() -> None:
    """While bulk requests wait, one slot in 33 is theirs however many interactive requests fill
    the batches; once none waits, interactive requests take every slot."""
    queue: FairQueue[Waiting] = FairQueue({})
    bulk = [Waiting(B_BULK) for _ in range(2)]
    interactive = [Waiting(A) for _ in range(100)]
    for item in [*bulk, *interactive]:
        queue.push(item)
    taken = [item for _ in range(12) for item in queue.take(8)]
    assert len(taken) == 96 and len(queue) == 6
    assert [i for i, item in enumerate(taken) if item.sender.bulk] == [32, 65]


def test_requests_whose_caller_is_gone_are_skipped() -> None:
    queue: FairQueue[Waiting] = FairQueue({})
    items = [Waiting(A, 1.0), Waiting(A, 2.0), Waiting(B, 3.0)]
    for item in items:
        queue.push(item)
    items[0].gone = True
    assert queue.oldest() == 2.0
    assert queue.take(8) == items[1:]
    assert queue.oldest() is None and not len(queue)


# ---- decoding keys -------------------------------------------------------------------------


def test_a_flood_on_one_decoding_key_holds_another_keys_request_back_one_batch() -> None:
    """a's n-best request (another decoding key) arrives after b's 40 translations: the keys take
    turns, so it runs after one batch of b's, not after all five."""
    backend = Backend()
    batcher: MicroBatcher[Job, str] = MicroBatcher(backend, max_batch_size=8, max_wait_ms=5)
    run_queued(batcher, backend, Job("b0", B), [*jobs("b", B, 40), Job("a1", A, key=(4, 4))])
    assert backend.calls[2] == ["a1"]
    assert all("a1" not in call for call in backend.calls[3:])


# ---- the latency cap -----------------------------------------------------------------------


def test_the_batch_cost_line_and_its_cap() -> None:
    costs = BatchCosts()
    assert costs.cap(0.045, 32) == 32, "nothing measured: no cap"
    costs.observe(1, 0.012)
    assert costs.cap(0.045, 32) == 32, "one size measured: the slope is unknown"
    costs.observe(11, 0.112)
    fixed, per_request = costs.line() or (0.0, 0.0)
    assert fixed == pytest.approx(0.002) and per_request == pytest.approx(0.010)
    assert costs.cap(0.045, 32) == 4, "0.002 + 4 × 0.010 s fits in 45 ms, 5 would not"
    assert costs.cap(0.045, 3) == 3
    assert costs.cap(0.001, 32) == 2, "never below what costs twice a lone request"
    flat = BatchCosts()  # a GPU: 32 requests cost about one
    flat.observe(1, 0.100)
    flat.observe(32, 0.110)
    assert flat.cap(0.045, 32) == 32
    steep = BatchCosts()
    steep.observe(1, 1.0)
    steep.observe(2, 5.0)
    assert steep.cap(0.045, 32) == 1, "never below one"


@pytest.mark.parametrize("target_ms", [None, 45.0], ids=["no-target", "45ms"])
def test_the_latency_target_caps_batches_once_costs_are_measured(target_ms: float | None) -> None:
    """10 ms a request: a lone request, then (all queued behind a second lone one) a full batch of
    16, measure the cost line; under a 45 ms target later batches hold about 4 (what runs within
    it), without a target 16 as before."""
    backend = Backend(0.010, gated=False)
    batcher: MicroBatcher[Job, str] = MicroBatcher(
        backend, max_batch_size=16, max_wait_ms=20, latency_target_ms=target_ms
    )

    async def run() -> None:
        await batcher.submit(Job("z0", Z))
        await asyncio.gather(*(batcher.submit(job) for job in jobs("b", B, 60)))
        await batcher.close()

    asyncio.run(run())
    assert backend.sizes[:3] == [1, 1, 16]
    later = backend.sizes[3:]
    if target_ms is None:
        assert batcher.batch_cap == 16 and max(later) == 16
    else:
        assert 2 <= batcher.batch_cap <= 6 and max(later) <= 6, backend.sizes
        assert sum(later) == 43


def test_an_owner_alone_gets_full_batches_until_another_owners_request_meets_its_own() -> None:
    """Under a 45 ms target, B alone: the costs are measured (about 4 requests fit), yet B's batches
    stay full (16), since nobody else waits. Then owner Z's request arrives among B's: the model is
    shared, and B's batches are capped."""
    backend = Backend(0.010, gated=False)
    batcher: MicroBatcher[Job, str] = MicroBatcher(
        backend, max_batch_size=16, max_wait_ms=20, latency_target_ms=45.0
    )

    async def run() -> list[int]:
        await batcher.submit(Job("b0", B))
        await asyncio.gather(*(batcher.submit(job) for job in jobs("b", B, 60)))
        alone = list(backend.sizes)
        assert 2 <= batcher.latency_cap <= 6 and batcher.batch_cap == 16
        await asyncio.gather(batcher.submit(Job("z0", Z)), *(batcher.submit(job) for job in jobs("c", B, 60)))
        assert batcher.batch_cap == batcher.latency_cap
        await batcher.close()
        return alone

    alone = asyncio.run(run())
    assert max(alone) == 16 and sum(alone) == 61, alone
    shared = backend.sizes[len(alone) :]
    assert sum(shared) == 61 and max(shared) <= 6, shared


# ---- metrics -------------------------------------------------------------------------------


def test_metrics_count_queue_wait_and_batch_slots_by_class() -> None:
    metrics = NodeMetrics()
    requests = [
        TranslateRequest(["a"], ["swh_Latn"], sender=A),
        TranslateRequest(["b"], ["swh_Latn"], sender=B_BULK),
        TranslateRequest(["c"], ["swh_Latn"], sender=B),
    ]
    metrics.observe_batch(requests, [0.5, 2.0, 0.25], 0.1, [[], [], []])
    sample = metrics.registry.get_sample_value
    assert sample("serval_node_batch_slots_total", {"work_class": "interactive"}) == 2
    assert sample("serval_node_batch_slots_total", {"work_class": "bulk"}) == 1
    assert sample("serval_node_queue_wait_seconds_sum", {"work_class": "interactive"}) == 0.75
    assert sample("serval_node_queue_wait_seconds_sum", {"work_class": "bulk"}) == 2.0
    assert sample("serval_node_batch_owners_sum") == 2


# ---- the API service names the sender on its work items -------------------------------------


def test_work_items_carry_the_sender_and_an_earlier_services_items_read_as_interactive() -> None:
    model = ModelRevision("e" * 24, 3)
    item = work_item("r1", time.monotonic() + 5, model, B_BULK, translate=node_pb2.TranslateOp(segment="hi"))
    assert (item.owner, item.key_id, item.work_class) == ("owner-b", "key-b", node_pb2.WORK_CLASS_BULK)
    assert sender_of(node_pb2.WorkItem.FromString(item.SerializeToString())) == B_BULK
    older = node_pb2.WorkItem(request_id="r2", translate=node_pb2.TranslateOp(segment="hi"))
    assert sender_of(older) == UNKNOWN_SENDER and not sender_of(older).bulk


class RecordingModel:
    """Stands for a loaded model: remembers the sender each operation was given."""

    def __init__(self) -> None:
        self.senders: list[Sender] = []

    async def translate(self, *args: Any, sender: Sender, **kwargs: Any) -> list[Any]:
        self.senders.append(sender)
        return []

    async def word_graph(self, *args: Any, sender: Sender, **kwargs: Any) -> WordGraph:
        self.senders.append(sender)
        return translation.echo_word_graph("hi")


def test_the_node_hands_the_work_items_sender_to_the_model() -> None:
    model = RecordingModel()
    deadline = time.monotonic() + 5
    revision = ModelRevision("e" * 24, 3)
    items = [
        work_item("r1", deadline, revision, B_BULK, translate=node_pb2.TranslateOp(segment="hi", n=1)),
        work_item("r2", deadline, revision, A, word_graph=node_pb2.WordGraphOp(segment="hi")),
        node_pb2.WorkItem(request_id="r3", translate=node_pb2.TranslateOp(segment="hi", n=1)),
    ]
    for item in items:
        asyncio.run(_run_operation(cast(Any, model), item))
    assert model.senders == [B_BULK, A, UNKNOWN_SENDER]


def test_what_is_bulk() -> None:
    assert work_class() is WorkClass.INTERACTIVE
    assert work_class(sentences=8) is WorkClass.INTERACTIVE, "a translator's paragraph"
    assert work_class(sentences=9) is WorkClass.BULK
    assert work_class(sentences=1, texts=2) is WorkClass.BULK, "a LibreTranslate list"
    caller = Caller(owner="owner-a", key_id="key-a")
    assert caller.sender() == A
    assert Caller(owner="owner-a").sender(WorkClass.BULK) == Sender("owner-a", "", WorkClass.BULK)


class FakeDispatcher:
    """Answers every work item with its segment and remembers the work."""

    def __init__(self) -> None:
        self.work: list[Any] = []

    async def translate(self, work: TranslateWork, *, request_id: str, timeout_s: float) -> Served[Any]:
        self.work.append(work)
        return Served([translation.echo_result(work.segment)] * work.n, 1)

    async def word_graph(self, work: WordGraphWork, *, request_id: str, timeout_s: float) -> Served[Any]:
        self.work.append(work)
        return Served(translation.echo_word_graph(work.segment), 1)

    def loading(self, model: ModelRevision) -> bool:
        return False


class FakeQuotas:
    async def translate(self, caller: Caller, count: int = 1, *, counted: int = 0) -> None:
        return None

    def max_chars(self, caller: Caller, default: int) -> int:
        return default


ENGINE_ID = "e" * 24
CALLER = Caller(owner="owner-a", scopes=frozenset({READ_ENGINES}), key_id="key-a")


class FakeLookups:
    async def engine(self, engine_id: str) -> EngineRecord:
        engine = EngineRow(
            id=ENGINE_ID,
            owner=CALLER.owner,
            type="nmt",
            source_language="en",
            target_language="sw",
            source_code="eng_Latn",
            target_code="swh_Latn",
            model_revision=1,
        )
        return EngineRecord(engine, has_train_segments=False)


@pytest.fixture
def services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Services:
    settings = Settings(
        home=tmp_path, api=ApiSettings(public_base_model_enabled=True, public_base_model="base-model")
    )
    services = Services(
        settings=settings, db=cast(Any, None), launcher=cast(Any, None), dispatcher=FakeDispatcher()
    )
    services.__dict__["quotas"] = FakeQuotas()
    services.__dict__["lookups"] = FakeLookups()
    record = text_translation._BaseModelRecord(
        ModelRevision.of_base_model("base-model"), ("eng_Latn", "swh_Latn"), time.monotonic()
    )
    monkeypatch.setitem(text_translation._base_models, (settings.resolved_store_url, "base-model"), record)
    return services


def sent(services: Services) -> list[Sender]:
    return [work.sender for work in cast(FakeDispatcher, services.dispatcher).work]


def test_the_api_service_names_owner_key_and_class_on_what_it_dispatches(services: Services) -> None:
    """Translate, prefix and word graph are interactive; a text's sentences interactive for a
    paragraph, bulk for a long text or a LibreTranslate list."""
    caller = Caller(owner="owner-a", scopes=frozenset({READ_ENGINES}), key_id="key-a")

    async def run() -> None:
        await translation.translate(services, caller, ENGINE_ID, "Hello")
        await translation.translate_prefix(services, caller, ENGINE_ID, "Hello", "Ha")
        graph = await translation.get_word_graph(services, caller, ENGINE_ID, "Hello")
        assert isinstance(graph.value, WordGraph)
        assert sent(services) == [A, A, A]
        cast(FakeDispatcher, services.dispatcher).work.clear()

        short = await text_translation.translate_text(services, caller, "eng_Latn", "swh_Latn", "Go! Go!")
        assert short.translation == "Go! Go!"
        assert sent(services) == [A, A]
        cast(FakeDispatcher, services.dispatcher).work.clear()

        await text_translation.translate_text(services, caller, "eng_Latn", "swh_Latn", "Go! " * 20)
        bulk = Sender("owner-a", "key-a", WorkClass.BULK)
        assert sent(services) == [bulk] * 20
        cast(FakeDispatcher, services.dispatcher).work.clear()

        await text_translation.translate_text(services, caller, "eng_Latn", "swh_Latn", "Go!", texts=3)
        assert sent(services) == [bulk]

    asyncio.run(run())


def test_an_administrator_sets_weights_and_the_target_in_the_nodes_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SERVAL_NODE__BATCH_WEIGHTS", '{"owner:scripture-forge": 4, "key:k1": 0.5}')
    monkeypatch.setenv("SERVAL_NODE__BATCH_LATENCY_TARGET_MS", "0")
    node = Settings().node
    assert node.batch_weights == {"owner:scripture-forge": 4.0, "key:k1": 0.5}
    assert node.batch_latency_target_ms == 0, "0: no cap"
    assert NodeSettings().batch_latency_target_ms == 100.0
    with pytest.raises(ValueError, match="owner:ID"):
        NodeSettings(batch_weights={"scripture-forge": 2.0})
    with pytest.raises(ValueError, match="above 0"):
        NodeSettings(batch_weights={"owner:x": 0.0})
