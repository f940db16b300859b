from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference_gpu.batcher import COMPANY_PROBE_EVERY, BatcherClosed, MicroBatcher
from inference_gpu.families.nmt.backends import Hypothesis, TranslateRequest
from inference_gpu.families.nmt.backends.ctranslate2 import CTranslate2Backend
from serval_common.nllb_tokenizer import NllbTokenizer
from serval_common.settings import NodeSettings
from tests.helpers import verse_pairs

SETTINGS = NodeSettings(device="cpu", compute_type="int8", max_decoding_length=16)
Batcher = MicroBatcher[TranslateRequest, list[Hypothesis]]


@pytest.fixture(scope="module")
def backend(tiny_ct2_model: Path) -> Iterator[CTranslate2Backend]:
    loaded = CTranslate2Backend.load(tiny_ct2_model, SETTINGS)
    yield loaded
    loaded.unload()


@pytest.fixture(scope="module")
def requests(tiny_ct2_model: Path) -> list[TranslateRequest]:
    tokenizer = NllbTokenizer.from_folder(tiny_ct2_model)
    sources, _ = verse_pairs("engwebp", "swh1850", 16)
    return [
        TranslateRequest(tokenizer.encode(s, "eng_Latn").tokens, ["swh_Latn"], num_hypotheses=1, beam_size=2)
        for s in sources
    ]


class Recorder:
    """Runs the real backend and remembers what each call was given."""

    def __init__(self, backend: CTranslate2Backend) -> None:
        self.backend = backend
        self.calls: list[list[TranslateRequest]] = []
        self.threads: set[int] = set()

    def __call__(self, batch: list[TranslateRequest]) -> list[list[Hypothesis]]:
        self.calls.append(batch)
        self.threads.add(threading.get_ident())
        return self.backend.translate(batch)


def _same(a: list[Hypothesis], b: list[Hypothesis]) -> bool:
    return [h.tokens for h in a] == [h.tokens for h in b] and all(
        abs(x.score - y.score) < 1e-3 and x.attention.shape == y.attention.shape
        for x, y in zip(a, b, strict=True)
    )


def test_concurrent_requests_share_backend_calls(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    singles = [backend.translate([request])[0] for request in requests]
    recorder = Recorder(backend)
    sizes: list[int] = []
    batcher: Batcher = MicroBatcher(recorder, max_batch_size=8, max_wait_ms=20, on_batch=sizes.append)

    async def run() -> list[list[Hypothesis]]:
        answers = await asyncio.gather(*(batcher.submit(r) for r in requests))
        await batcher.close()
        return answers

    answers = asyncio.run(run())
    assert len(recorder.calls) < len(requests)
    assert batcher.stats.calls == len(recorder.calls) == len(sizes)
    assert sum(sizes) == len(requests) and max(sizes) <= 8
    assert threading.get_ident() not in recorder.threads
    for request, answer, single in zip(requests, answers, singles, strict=True):
        assert _same(answer, single)
        assert answer[0].attention.shape[1] == len(request.source)


def test_requests_with_different_decoding_settings_are_not_mixed(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    recorder = Recorder(backend)
    batcher: Batcher = MicroBatcher(recorder, max_batch_size=32, max_wait_ms=20)
    mixed = [
        TranslateRequest(r.source, r.target_prefix, num_hypotheses=n, beam_size=max(2, n))
        for r, n in zip(requests[:12], [1, 2, 3] * 4, strict=True)
    ]

    async def run() -> list[list[Hypothesis]]:
        answers = await asyncio.gather(*(batcher.submit(r) for r in mixed))
        await batcher.close()
        return answers

    answers = asyncio.run(run())
    # The first request starts alone at the idle model; the rest queue, one batch per setting.
    assert len(recorder.calls) == 4 and len(recorder.calls[0]) == 1
    for call in recorder.calls:
        assert len({r.key for r in call}) == 1
    for request, answer in zip(mixed, answers, strict=True):
        assert len(answer) == request.num_hypotheses


def test_a_failing_batch_fails_every_caller(tiny_ct2_model: Path, requests: list[TranslateRequest]) -> None:
    unloaded = CTranslate2Backend.load(tiny_ct2_model, SETTINGS)
    unloaded.unload()
    batcher: Batcher = MicroBatcher(unloaded.translate, max_batch_size=8, max_wait_ms=20)

    async def run() -> list[list[Hypothesis] | BaseException]:
        answers = await asyncio.gather(*(batcher.submit(r) for r in requests[:5]), return_exceptions=True)
        await batcher.close()
        return answers

    answers = asyncio.run(run())
    assert batcher.stats.calls == 2, "the first request alone at the idle model, then the other four"
    assert all(isinstance(a, RuntimeError) and "unloaded" in str(a) for a in answers)


def test_close_fails_queued_requests_and_drain_answers_them(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    async def run(drain: bool) -> list[list[Hypothesis] | BaseException]:
        gate = threading.Event()

        def held(batch: list[TranslateRequest]) -> list[list[Hypothesis]]:
            gate.wait(30)
            return backend.translate(batch)

        batcher: Batcher = MicroBatcher(held, max_batch_size=32, max_wait_ms=60_000)
        waiting = [asyncio.ensure_future(batcher.submit(r)) for r in requests[:3]]
        await asyncio.sleep(0.01)
        assert batcher.stats.calls == 1, "the first request runs at once; the others queue behind it"
        if drain:
            gate.set()
        await batcher.close(drain=drain)
        gate.set()
        with pytest.raises(BatcherClosed):
            await batcher.submit(requests[0])
        return await asyncio.gather(*waiting, return_exceptions=True)

    assert all(isinstance(a, BatcherClosed) for a in asyncio.run(run(drain=False)))
    assert all(isinstance(a, list) and a for a in asyncio.run(run(drain=True)))


def test_an_idle_model_answers_without_waiting_for_a_batch(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    """`max_wait_ms` only holds requests back while a batch runs: alone, a request goes at once."""
    batcher: Batcher = MicroBatcher(backend.translate, max_batch_size=32, max_wait_ms=600_000)

    async def run() -> list[Hypothesis]:
        answer = await asyncio.wait_for(batcher.submit(requests[0]), timeout=60)
        await batcher.close()
        return answer

    assert asyncio.run(run())[0].tokens
    assert batcher.stats.sizes == {1: 1}


def test_a_burst_at_an_idle_model_waits_a_share_of_a_lone_request(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    """Once the batcher has seen what a lone request costs (here made ~1 s, like a large model on a
    CPU), a request arriving at the idle model waits 5% of that (50 ms) for company, so a burst
    spread over a few milliseconds runs as one batch rather than its first member alone."""

    def slow(batch: list[TranslateRequest]) -> list[list[Hypothesis]]:
        time.sleep(1.0)
        return backend.translate(batch)

    batcher: Batcher = MicroBatcher(slow, max_batch_size=8, max_wait_ms=10_000)

    async def run() -> list[list[Hypothesis]]:
        await batcher.submit(requests[0])
        assert 0.04 <= batcher.wait_limit_s <= 0.2
        first = asyncio.ensure_future(batcher.submit(requests[1]))
        await asyncio.sleep(0.005)
        rest = [asyncio.ensure_future(batcher.submit(r)) for r in requests[2:5]]
        answers = await asyncio.gather(first, *rest)
        await batcher.close()
        return answers

    answers = asyncio.run(run())
    assert all(answer[0].tokens for answer in answers)
    assert batcher.stats.sizes == {1: 1, 4: 1}


def test_a_cancelled_request_is_skipped(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    """A request cancelled while it waits behind a running batch never reaches the backend."""
    recorder = Recorder(backend)
    gate = threading.Event()

    def held(batch: list[TranslateRequest]) -> list[list[Hypothesis]]:
        gate.wait(30)
        return recorder(batch)

    batcher: Batcher = MicroBatcher(held, max_batch_size=8, max_wait_ms=20)

    async def run() -> list[Hypothesis]:
        running = asyncio.ensure_future(batcher.submit(requests[0]))
        await asyncio.sleep(0)
        cancelled = asyncio.ensure_future(batcher.submit(requests[1]))
        kept = asyncio.ensure_future(batcher.submit(requests[2]))
        await asyncio.sleep(0)
        cancelled.cancel()
        gate.set()
        await running
        answer = await kept
        await batcher.close()
        return answer

    assert asyncio.run(run())
    assert [call for call in recorder.calls] == [[requests[0]], [requests[2]]]


def test_requests_stop_waiting_for_company_that_never_comes(
    backend: CTranslate2Backend, requests: list[TranslateRequest]
) -> None:
    """One client, one request after another: each would wait 5% of a lone request for nobody.
    Once waiting has stopped gaining company the batcher stops waiting, bar a probe every
    `COMPANY_PROBE_EVERY` requests, and a burst still shares one batch."""

    def slow(batch: list[TranslateRequest]) -> list[list[Hypothesis]]:
        time.sleep(0.04)
        return backend.translate(batch)

    batcher: Batcher = MicroBatcher(slow, max_batch_size=8, max_wait_ms=10_000)
    waits: list[float] = []
    batcher.on_result = lambda _requests, queued, _seconds, _results: waits.extend(queued)

    async def run() -> None:
        await batcher.submit(requests[0])
        assert batcher.wait_limit_s >= 0.001, "at first a lone request waits a share of its cost"
        for request in requests * 2:
            await batcher.submit(request)
        waits.clear()
        for request in requests * 2:
            await batcher.submit(request)
        await batcher.close()

    asyncio.run(run())
    waited = [w for w in waits if w >= 0.001]
    assert len(waits) == 2 * len(requests) and len(waited) <= 2 * len(requests) // COMPANY_PROBE_EVERY + 1
