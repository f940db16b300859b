"""Owner-fair waiting in the API service's dispatcher, and a long text as many requests (issue 37).

- `FairWaiters` (`serval_api/routing/fair_waiters.py`): the order waiters are served in
  (interactive first, owners in turn, each owner first come first served), one woken per free slot
  that fits it, every one on a structural change.
- The real API service with the test playing a one-slot node over gRPC: an owner over its
  waiting cap is refused while another owner's request still queues, and when the slot frees the
  other owner's waiting request goes before the first owner's backlog.
- A long text (`service/text_translation.py`): its sentences run at most
  `api.text_sentence_concurrency` at a time, are cancelled together when one fails, and count
  against the key's translate limit (at most its whole limit for one text).

Orders and counts are asserted, never durations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serval.inference.v1 import node_pb2
from serval_api.auth import ADMIN, READ_ENGINES, Caller
from serval_api.errors import InvalidArgument, RateLimited
from serval_api.routing.fair_waiters import FairWaiters, Waiter
from serval_api.routing.session import NodeSession
from serval_api.routing.work import Served, TranslateWork
from serval_api.service import text_translation, translation
from serval_api.service.context import Services
from serval_api.service.keys import create_api_key
from serval_common.core import Sender, WorkClass
from serval_common.model_revision import ModelRevision
from serval_common.settings import ApiSettings, LimitSettings, Settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_node_protocol import (
    ScriptedNode,
    _complete_build,
    fast_heartbeat_api,
    new_node_token,
    wait_until,
)
from tests.helpers import metrics_text


def interactive(owner: str) -> Sender:
    return Sender(owner, f"key-{owner}")


def bulk(owner: str) -> Sender:
    return Sender(owner, f"key-{owner}", WorkClass.BULK)


def session(session_id: str, slots: int) -> NodeSession:
    """A node session with `slots` free slots."""
    return NodeSession(session_id=session_id, node_id=session_id, device=node_pb2.DeviceInfo(), slots=slots)


def fits_ready(node: NodeSession) -> bool:
    """A waiter whose model every node holds ready."""
    return True


def names(waiters: list[Waiter]) -> list[str]:
    return [f"{w.sender.owner}{'*' if w.sender.bulk else ''}" for w in waiters]


# ---- FairWaiters: the order ------------------------------------------------------------------


def test_owners_take_turns_and_each_owners_waiters_keep_their_order() -> None:
    waiters = FairWaiters()
    a = [waiters.add(interactive("a"), fits_ready) for _ in range(3)]
    b = waiters.add(interactive("b"), fits_ready)
    c = [waiters.add(interactive("c"), fits_ready) for _ in range(2)]
    assert waiters.order() == [a[0], b, c[0], a[1], c[1], a[2]]
    assert waiters.waiting("a") == 3 and waiters.waiting("b") == 1 and waiters.waiting("nobody") == 0


def test_an_owner_admitted_lately_goes_after_owners_not_served_since() -> None:
    """Owner a's work fills the node (its last request was admitted), so owner b, who arrived after
    a's backlog, is served first."""
    waiters = FairWaiters()
    waiters.admitted("b")
    waiters.admitted("a")
    a = [waiters.add(interactive("a"), fits_ready) for _ in range(3)]
    b = waiters.add(interactive("b"), fits_ready)
    new = waiters.add(interactive("new"), fits_ready)
    assert waiters.order() == [new, b, a[0], a[1], a[2]]
    waiters.admitted("new")
    waiters.remove(new)
    assert waiters.order() == [b, a[0], a[1], a[2]]
    waiters.admitted("b")
    waiters.remove(b)
    assert waiters.order() == a


def test_interactive_waiters_go_before_bulk_waiters_of_every_owner() -> None:
    waiters = FairWaiters()
    for _ in range(2):
        waiters.add(bulk("a"), fits_ready)
    waiters.add(interactive("a"), fits_ready)
    waiters.add(bulk("b"), fits_ready)
    waiters.add(interactive("b"), fits_ready)
    assert names(waiters.order()) == ["a", "b", "a*", "b*", "a*"]


def test_removing_a_waiter_forgets_it_and_its_owners_count() -> None:
    waiters = FairWaiters()
    first = waiters.add(interactive("a"), fits_ready)
    waiters.add(interactive("a"), fits_ready)
    waiters.remove(first)
    waiters.remove(first)  # twice is harmless
    assert len(waiters) == 1 and waiters.waiting("a") == 1


# ---- FairWaiters: who is woken ---------------------------------------------------------------


def test_one_waiter_is_woken_per_free_slot_in_fair_order() -> None:
    waiters = FairWaiters()
    waiters.admitted("a")
    a = [waiters.add(interactive("a"), fits_ready) for _ in range(3)]
    b = waiters.add(bulk("b"), fits_ready)
    c = waiters.add(interactive("c"), fits_ready)
    node = session("s1", slots=2)
    assert waiters.wake([node]) == [c, a[0]]
    assert [w.woken for w in (a[0], a[1], a[2], b, c)] == [True, False, False, False, True]
    assert waiters.wake([node]) == [], "the two woken waiters have the two free slots"
    node.slots = 3
    assert waiters.wake([node]) == [a[1]]


def test_a_slot_goes_to_the_next_waiter_that_can_use_it() -> None:
    """Owner a's model is loading (no node serves it); a slot free on the node serving b's model
    goes to b, and a is woken by the structural change when its model is ready."""
    waiters = FairWaiters()
    serving_b = session("s1", slots=1)
    a = waiters.add(interactive("a"), lambda node: False)
    b = waiters.add(interactive("b"), lambda node: node is serving_b)
    assert waiters.wake([serving_b]) == [b]
    assert not a.woken
    assert waiters.wake([serving_b], everyone=True) == [a]


def test_a_draining_or_full_node_wakes_nobody_until_a_structural_change() -> None:
    waiters = FairWaiters()
    first, second = waiters.add(interactive("a"), fits_ready), waiters.add(interactive("b"), fits_ready)
    full = session("s1", slots=0)
    draining = session("s2", slots=4)
    draining.draining = True
    assert waiters.wake([full, draining]) == []
    assert waiters.wake([full, draining], everyone=True) == [first, second]


def test_a_woken_waiter_waits_again_in_its_place() -> None:
    async def run() -> None:
        waiters = FairWaiters()
        first = waiters.add(interactive("a"), fits_ready)
        second = waiters.add(interactive("a"), fits_ready)
        waiters.wake([session("s1", slots=1)])
        assert first.woken
        assert not await first.wait(0.01), "nothing woke it again"
        assert not first.woken
        assert waiters.order() == [first, second]

    asyncio.run(run())


# ---- the dispatcher, with the test playing a one-slot node ---------------------------------


def _built_engine(api: RunningApi, owner: str) -> str:
    with api.client(owner) as client:
        engine = create_engine(client)
        client.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []})
    spec = api.launcher.specs[-1]
    _complete_build(api, spec.build_id, spec.job_token)
    return str(engine["id"])


@pytest.fixture
def capped(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    with fast_heartbeat_api(tmp_path, database_url, max_queued_per_owner=2, request_timeout_s=30) as api:
        yield api


def test_an_owner_over_its_waiting_cap_is_refused_and_another_owner_goes_before_its_backlog(
    capped: RunningApi,
) -> None:
    api = capped
    assert api.service.services is not None
    dispatcher = api.service.services.dispatcher
    engines = {owner: _built_engine(api, owner) for owner in ("owner-a", "owner-b")}
    keys = {owner: api.api_key(owner) for owner in engines}
    node = ready_node(api, "n1", list(engines.values()), slots=1)
    pool = ThreadPoolExecutor(6)
    translate = translator(api, engines, keys)

    def next_item() -> node_pb2.WorkItem:
        return next_work(node)

    try:
        time.sleep(0.3)

        answers: list[Future[httpx.Response]] = [pool.submit(translate, "owner-a", "a0")]
        running = next_item()
        assert (running.owner, running.translate.segment) == ("owner-a", "a0")
        for text in ("a1", "a2"):
            answers.append(pool.submit(translate, "owner-a", text))
            wait_until(lambda: dispatcher.queue_size() == len(answers) - 1, 30)

        refused = translate("owner-a", "a3")
        assert refused.status_code == 503, refused.text
        assert "too many of your requests are waiting" in refused.text
        assert refused.headers["Retry-After"] == "1"

        answers.append(pool.submit(translate, "owner-b", "b0"))
        wait_until(lambda: dispatcher.queue_size() == 3, 30)

        order: list[str] = []
        for _ in range(3):
            answer(node, running)
            running = next_item()
            order.append(running.translate.segment)
        answer(node, running)
        assert order == ["b0", "a1", "a2"], "owner b's request goes before owner a's backlog"
        assert [a.result(timeout=30).status_code for a in answers] == [200] * 4
    finally:
        node.close()
        pool.shutdown(wait=False)


def next_work(node: ScriptedNode) -> node_pb2.WorkItem:
    while True:
        message = node.read(30)
        if message.HasField("work"):
            return message.work


def answer(node: ScriptedNode, item: node_pb2.WorkItem) -> None:
    """The work item answered with its segment in capitals."""
    done = node_pb2.TranslationResult(translation=item.translate.segment.upper())
    node.send(
        result=node_pb2.WorkResult(
            request_id=item.request_id, translate=node_pb2.TranslateOutput(results=[done])
        )
    )


def dispatch_waits(api: RunningApi) -> dict[str, float]:
    """How many requests of each work class took a node slot, as `/metrics` counts them."""
    for family in text_string_to_metric_families(metrics_text(api.rest_url)):
        if family.name == "serval_api_dispatch_wait_seconds":
            return {
                sample.labels["work_class"]: sample.value
                for sample in family.samples
                if sample.name.endswith("_count")
            }
    raise AssertionError("/metrics has no serval_api_dispatch_wait_seconds")


def translator(
    api: RunningApi, engines: dict[str, str], keys: dict[str, str]
) -> Callable[[str, str], httpx.Response]:
    """A REST translate of `text` by `owner` on its engine."""

    def translate(owner: str, text: str) -> httpx.Response:
        with httpx.Client(
            base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": keys[owner]}, timeout=60
        ) as client:
            return client.post(f"/translation/engines/{engines[owner]}/translate", json=text)

    return translate


def ready_node(api: RunningApi, node_id: str, engines: list[str], slots: int) -> ScriptedNode:
    """A scripted node of `slots` slots holding every engine's first revision ready."""
    node = ScriptedNode(api.grpc_target, new_node_token(api))
    node.hello(slots=slots, free_slots=slots, node_id=node_id)
    assert node.read().HasField("welcome")
    node.keep_alive()
    for engine_id in engines:
        model = node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")
        node.send(model_status=node_pb2.ModelStatus(model=model, state=node_pb2.MODEL_STATE_READY))
    return node


def test_a_5000_character_text_of_one_owner_does_not_hold_back_another_owners_translate(
    api: RunningApi,
) -> None:
    """Owner b sends SIL Converters a 5,000-character text of 1,250 sentences (`"Go! "` x 1,250)
    on a node of two slots. Its sentences run 8 at a time (`api.text_sentence_concurrency`), as
    bulk work: owner a's translate, sent while they wait, is the very next work the node gets, and
    both are answered whole."""
    assert api.service.services is not None
    dispatcher = api.service.services.dispatcher
    engines = {owner: _built_engine(api, owner) for owner in ("owner-a", "owner-b")}
    key_a = api.api_key("owner-a")
    _, key_b = api.run(
        create_api_key(api.service.services.db, "owner-b", [READ_ENGINES], engine_id=engines["owner-b"])
    )
    node = ready_node(api, "n1", list(engines.values()), slots=2)
    pool = ThreadPoolExecutor(2)
    text = "Go! " * 1250
    assert len(text) == 5000

    def long_text() -> httpx.Response:
        with httpx.Client(base_url=api.rest_url, headers={"X-API-Key": key_b}, timeout=120) as client:
            (source, target) = client.get("/api/v1/translate/languages/").json()
            body = {"sourceLanguage": source, "targetLanguage": target, "text": text}
            return client.post("/api/v1/translate/", json=body)

    def translate_a() -> httpx.Response:
        with httpx.Client(
            base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": key_a}, timeout=60
        ) as client:
            return client.post(f"/translation/engines/{engines['owner-a']}/translate", json="a0")

    try:
        time.sleep(0.3)
        b_text = pool.submit(long_text)
        running = [next_work(node), next_work(node)]
        assert {item.owner for item in running} == {"owner-b"}
        assert all(item.work_class == node_pb2.WORK_CLASS_BULK for item in running)
        wait_until(lambda: dispatcher.queue_size() == 6, 30)  # 8 at a time: 2 on the node, 6 waiting

        a_answer = pool.submit(translate_a)
        wait_until(lambda: dispatcher.queue_size() == 7, 30)
        answer(node, running.pop(0))
        item = next_work(node)
        assert (item.owner, item.translate.segment) == ("owner-a", "a0"), "a's translate goes next"
        assert item.work_class == node_pb2.WORK_CLASS_INTERACTIVE
        answer(node, item)
        assert a_answer.result(timeout=30).json()["translation"] == "A0"

        answered = 1
        while running:
            answer(node, running.pop(0))
            answered += 1
            if answered < 1250:
                running.append(next_work(node))
            assert dispatcher.queue_size() <= 6, "never more than 8 of the text's sentences at once"
        reply = b_text.result(timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["translatedText"] == text.upper(), "every sentence answered, whitespace kept"
        waits = dispatch_waits(api)
        assert (waits["interactive"], waits["bulk"]) == (1, 1250), "/metrics counts each class's waits"
    finally:
        node.close()
        pool.shutdown(wait=False)


def test_fairness_holds_across_two_nodes(api: RunningApi) -> None:
    """Two nodes of one slot each serve both owners' engines. Owner b alone takes both nodes; its
    backlog waits in the API service. Owner a's request, sent behind that backlog, takes the next
    slot that frees on either node; then b's backlog goes on, on both."""
    assert api.service.services is not None
    dispatcher = api.service.services.dispatcher
    engines = {owner: _built_engine(api, owner) for owner in ("owner-a", "owner-b")}
    keys = {owner: api.api_key(owner) for owner in engines}
    nodes = [ready_node(api, node_id, list(engines.values()), slots=1) for node_id in ("n1", "n2")]
    pool = ThreadPoolExecutor(8)
    translate = translator(api, engines, keys)

    try:
        time.sleep(0.3)
        answers = [pool.submit(translate, "owner-b", f"b{i}") for i in range(6)]
        running: list[node_pb2.WorkItem | None] = [next_work(node) for node in nodes]
        assert {item.owner for item in running if item} == {"owner-b"}, "an owner alone uses both nodes"
        wait_until(lambda: dispatcher.queue_size() == 4, 30)
        with api.client("ops", (ADMIN,)) as admin:
            listed = admin.get("/admin/nodes").json()
        assert [node["workByOwner"] for node in listed] == [
            [{"owner": "owner-b", "interactive": 1, "bulk": 0}]
        ] * 2, "the admin API says who uses each node"
        answers.append(pool.submit(translate, "owner-a", "a0"))
        wait_until(lambda: dispatcher.queue_size() == 5, 30)

        for i, owner in ((1, "owner-a"), (0, "owner-b")):
            done = running[i]
            assert done is not None
            answer(nodes[i], done)
            item = next_work(nodes[i])
            assert item.owner == owner, "a's request takes the first slot to free, on either node; then b's"
            running[i] = item
        answered, in_flight = 2, 2
        while in_flight:
            for i, node in enumerate(nodes):
                done = running[i]
                if done is None:
                    continue
                answer(node, done)
                answered, in_flight, running[i] = answered + 1, in_flight - 1, None
                if answered + in_flight < len(answers):
                    running[i], in_flight = next_work(node), in_flight + 1
        assert all(a.result(timeout=30).status_code == 200 for a in answers)
        assert dispatcher.queue_size() == 0
    finally:
        for node in nodes:
            node.close()
        pool.shutdown(wait=False)


# ---- a long text -------------------------------------------------------------------------------


class GatedDispatcher:
    """Holds every sentence until released; counts how many are in flight at once, and which
    were cancelled. A sentence whose segment is "Stop!" fails."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled = 0
        self.in_flight = 0
        self.most = 0
        self.release = asyncio.Event()

    async def translate(self, work: TranslateWork, *, request_id: str, timeout_s: float) -> Served[Any]:
        self.started.append(work.segment)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if work.segment.strip() == "Stop!":
                await asyncio.sleep(0)
                raise InvalidArgument("too long")
            await self.release.wait()
            return Served([translation.echo_result(work.segment)] * work.n, 1)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    def loading(self, model: ModelRevision) -> bool:
        return False


BASE = "base-model"


def text_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dispatcher: Any, *, db: Any = None, **limits: Any
) -> Services:
    settings = Settings(
        home=tmp_path,
        api=ApiSettings(public_base_model_enabled=True, public_base_model=BASE, text_sentence_concurrency=3),
        limits=LimitSettings(refusal_delay_s=0, **limits),
    )
    services = Services(settings=settings, db=db, launcher=cast(Any, None), dispatcher=dispatcher)
    record = text_translation._BaseModelRecord(
        ModelRevision.of_base_model(BASE), ("eng_Latn", "swh_Latn"), time.monotonic()
    )
    monkeypatch.setitem(text_translation._base_models, (settings.resolved_store_url, BASE), record)
    return services


class Uncounted:
    async def translate(self, caller: Caller, count: int = 1, *, counted: int = 0) -> None:
        return None

    def max_chars(self, caller: Caller, default: int) -> int:
        return default


CALLER = Caller(owner="owner-a", scopes=frozenset({READ_ENGINES}), key_id="key-a")


def test_a_long_texts_sentences_run_a_few_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dispatcher = GatedDispatcher()
    services = text_services(tmp_path, monkeypatch, dispatcher)
    services.__dict__["quotas"] = Uncounted()

    async def run() -> None:
        text = asyncio.create_task(
            text_translation.translate_text(services, CALLER, "eng_Latn", "swh_Latn", "Go! " * 20)
        )
        while len(dispatcher.started) < 3:
            await asyncio.sleep(0)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(dispatcher.started) == 3, "at most text_sentence_concurrency sentences at once"
        dispatcher.release.set()
        done = await text
        assert done.translation == "Go! " * 20
        assert dispatcher.most == 3
        assert len(dispatcher.started) == 20

    asyncio.run(run())


def test_the_texts_of_one_request_share_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A LibreTranslate list of two long texts: 3 sentences in flight in all, not 3 a text."""
    dispatcher = GatedDispatcher()
    services = text_services(tmp_path, monkeypatch, dispatcher)
    services.__dict__["quotas"] = Uncounted()

    async def run() -> None:
        shared = text_translation.sentence_limit(services)

        async def one() -> text_translation.TextTranslation:
            return await text_translation.translate_text(
                services, CALLER, "eng_Latn", "swh_Latn", "Go! " * 10, texts=2, sentences_at_once=shared
            )

        both = asyncio.ensure_future(text_translation.together([one, one]))
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(dispatcher.started) == 3
        dispatcher.release.set()
        assert [t.translation for t in await both] == ["Go! " * 10] * 2
        assert dispatcher.most == 3 and len(dispatcher.started) == 20

    asyncio.run(run())


def test_when_one_sentence_fails_the_others_are_cancelled_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher = GatedDispatcher()
    services = text_services(tmp_path, monkeypatch, dispatcher)
    services.__dict__["quotas"] = Uncounted()

    async def run() -> None:
        with pytest.raises(InvalidArgument, match="too long to translate"):
            await text_translation.translate_text(
                services, CALLER, "eng_Latn", "swh_Latn", "Go! Go! Stop! " + "Go! " * 20
            )
        assert dispatcher.started == ["Go! ", "Go! ", "Stop! "], "nothing started after the failure"
        assert dispatcher.cancelled == 2, "the sentences in flight were cancelled"
        assert dispatcher.in_flight == 0

    asyncio.run(run())


def test_a_long_text_counts_each_sentence_against_the_keys_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    """translate_per_minute 12: a text of 5 sentences counts 5; one of 8 is then refused whole
    (nothing of it sent; it counts once, as any refused request), so 6 are left, and a text of 6
    takes them; a text of more sentences than the whole limit counts the limit, so a fresh key can
    still send it (once a minute)."""
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
    )
    api = RunningApi(settings)
    try:
        assert api.service.services is not None
        dispatcher = GatedDispatcher()
        dispatcher.release.set()
        services = text_services(
            tmp_path, monkeypatch, dispatcher, db=api.service.services.db, translate_per_minute=12
        )

        def text(caller: Caller, sentences: int) -> None:
            api.run(
                text_translation.translate_text(services, caller, "eng_Latn", "swh_Latn", "Go! " * sentences)
            )

        _not_near_a_minutes_end()
        text(CALLER, 5)
        with pytest.raises(RateLimited, match="12 translation requests a minute"):
            text(CALLER, 8)
        assert len(dispatcher.started) == 5, "a refused text sends nothing"
        text(CALLER, 6)
        with pytest.raises(RateLimited):
            text(CALLER, 1)
        assert len(dispatcher.started) == 11

        other = Caller(owner="owner-b", scopes=frozenset({READ_ENGINES}), key_id="key-b")
        text(other, 30)
        assert len(dispatcher.started) == 41
        with pytest.raises(RateLimited):
            text(other, 1)
    finally:
        api.close()


def _not_near_a_minutes_end(margin_s: float = 8.0) -> None:
    left = 60 - time.time() % 60
    if left < margin_s:
        time.sleep(left + 0.1)


def test_the_defaults_bound_one_owners_waiting_and_a_texts_sentences() -> None:
    api = ApiSettings()
    assert api.max_queued_per_owner == api.max_queued_requests // 4
    assert api.text_sentence_concurrency == 8
    with pytest.raises(ValueError):
        ApiSettings(max_queued_per_owner=0)
