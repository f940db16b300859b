"""A soak run: the API service and an inference node as real processes under a steady, bounded
mix of translate, n-best, word graph, prefix translate and train-segment calls over REST and
gRPC, for `SERVAL_SOAK_S` seconds (default 12, so CI stays short; run it by hand with 180 or
more). No request may fail, and the resident memory of both processes must stay flat.

    SERVAL_SOAK_S=180 .venv/bin/python -m pytest tests/e2e/test_soak.py -q -s
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_common.settings import Settings
from serval_common.store import open_store
from tests.e2e.conftest import BASE_MODEL, wait_for_build
from tests.e2e.test_build_lifecycle import nmt_engine
from tests.e2e.test_redial import start_api
from tests.helpers import (
    Answer,
    ClientRetryPolicy,
    Load,
    Tally,
    free_port,
    publish_tiny_base_model,
    rss_bytes,
    send_with_retries,
    verse_pairs,
)

SOAK_S = float(os.environ.get("SERVAL_SOAK_S", "12"))
CLIENTS = 3
PAUSE_S = 0.01
"""Between one client's requests: steady load that leaves the 2-core machine some room."""
MAX_REQUESTS = 200_000
"""A bound on the count as well as the time."""
SAMPLE_EVERY_S = 1.0
WARM_UP_S = min(10.0, SOAK_S / 4)
"""Samples from the first seconds are left out: models load, caches and allocator arenas fill."""
MIB = 1 << 20
GROWTH_BOUND_BYTES = 32 * MIB
"""How much the median resident memory of the last third of the (post-warm-up) samples may
exceed that of the first third, for each process.

Generous on purpose: Python's allocator and glibc's per-thread arenas grow in steps of several
MiB as threads and request sizes vary, and CTranslate2 keeps scratch buffers sized by the largest
batch it has seen, so a healthy process can wobble by several MiB over a short run (±1 MiB measured here). A leak of even a
few KiB per request (a response, a session, a future kept in a dict) exceeds the bound within a
180 s run (~50 requests/s here, so thousands between the thirds), and one of a hundred KiB or more
per request within the default 12 s; the printed table gives the growth per 1000 requests for a closer look."""
NO_RETRIES = ClientRetryPolicy(budget_s=0.0)
"""The service is up throughout: any failure counts, none is retried."""


@dataclass(frozen=True)
class Sample:
    at_s: float
    api: int
    node: int


class RssSampler:
    """Samples the resident memory of the API service and the node every `SAMPLE_EVERY_S`."""

    def __init__(self, api_pid: int, node_pid: int) -> None:
        self.pids = (api_pid, node_pid)
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._began = time.monotonic()

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            api, node = (rss_bytes(pid) for pid in self.pids)
            self.samples.append(Sample(time.monotonic() - self._began, api, node))
            self._stop.wait(SAMPLE_EVERY_S)


def thirds(values: list[int]) -> tuple[float, float]:
    """Medians of the first and last thirds."""
    third = max(1, len(values) // 3)
    return statistics.median(values[:third]), statistics.median(values[-third:])


@pytest.mark.sqlite_pass_only
@pytest.mark.timeout(int(SOAK_S) + 300)
def test_soak_memory_stays_flat_and_nothing_fails(
    tmp_path: Path, tiny_ct2_model: Path, database_url: str
) -> None:
    publish_tiny_base_model(open_store((tmp_path / "store").as_uri()), tiny_ct2_model, BASE_MODEL)
    api_key, node_token = create_credentials(Settings(home=tmp_path, database_url=database_url), "soak")
    grpc_port, rest_port = free_port(), free_port()
    rest_url = f"http://127.0.0.1:{rest_port}"
    api = start_api(tmp_path, grpc_port, rest_port, database_url, "api.log")
    node = processes.start(
        [
            "node",
            "--home",
            str(tmp_path),
            "--api-address",
            f"127.0.0.1:{grpc_port}",
            "--node-id",
            "soak-node",
        ],
        tmp_path / "node.log",
        {"SERVAL_NODE__TOKEN": node_token},
    )
    metadata = (("x-api-key", api_key),)

    def client() -> httpx.Client:
        return httpx.Client(base_url=f"{rest_url}/api/v1", headers={"X-API-Key": api_key}, timeout=60)

    rest = client()
    clients = [client() for _ in range(CLIENTS)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{grpc_port}") for _ in range(CLIENTS)]
    stubs = [engine_pb2_grpc.TranslationEngineApiStub(channel) for channel in channels]
    sources, targets = verse_pairs("engwebp", "swh1850", 600)
    short = [(s, t) for s, t in zip(sources, targets, strict=True) if len(s) < 150]
    translate_texts = [s for s, _ in short[:60]]
    trained_pairs = short[60:120]  # a stored pair answers its own source: keep them apart
    tally = Tally()
    by_kind: Counter[str] = Counter()
    failed_by_kind: Counter[str] = Counter()
    lock = threading.Lock()
    try:
        processes.RestClient(rest_url, api_key).wait_for_node(node)
        engine_id = nmt_engine(rest)
        build = rest.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []}).json()
        assert wait_for_build(rest, engine_id, build, 120)["state"] == "Completed"
        base = f"/translation/engines/{engine_id}"

        def over_grpc(call: Callable[[], Any]) -> None:
            began = time.monotonic()
            try:
                call()
                status, failure = 200, None
            except grpc.RpcError as exc:
                status, failure = 0, f"{exc.code()}: {exc.details()}"
            tally.record(Answer(began, time.monotonic(), status, 1, 0, None), failure)

        def send(thread: int, index: int) -> None:
            text = translate_texts[index % len(translate_texts)]
            source, target = trained_pairs[index % len(trained_pairs)]
            stub, http = stubs[thread], clients[thread]
            kinds: list[tuple[str, Callable[[], None]]] = [
                ("REST translate", lambda: rest_call(http, f"{base}/translate", text)),
                ("REST translate n=3", lambda: rest_call(http, f"{base}/translate/3", text)),
                ("REST word graph", lambda: rest_call(http, f"{base}/get-word-graph", text)),
                (
                    "REST translate prefix",
                    lambda: rest_call(
                        http, f"{base}/translate-prefix", {"segment": text, "prefix": "Na", "n": 2}
                    ),
                ),
                (
                    "REST train segment",
                    lambda: rest_call(
                        http,
                        f"{base}/train-segment",
                        {"sourceSegment": source, "targetSegment": target, "sentenceStart": True},
                    ),
                ),
                (
                    "gRPC Translate",
                    lambda: over_grpc(
                        lambda: stub.Translate(
                            engine_pb2.TranslateRequest(
                                engine_type="Nmt", engine_id=engine_id, segment=text, n=1
                            ),
                            metadata=metadata,
                            timeout=60,
                        )
                    ),
                ),
                (
                    "gRPC Translate n=3",
                    lambda: over_grpc(
                        lambda: stub.Translate(
                            engine_pb2.TranslateRequest(
                                engine_type="Nmt", engine_id=engine_id, segment=text, n=3
                            ),
                            metadata=metadata,
                            timeout=60,
                        )
                    ),
                ),
                (
                    "gRPC GetWordGraph",
                    lambda: over_grpc(
                        lambda: stub.GetWordGraph(
                            engine_pb2.GetWordGraphRequest(
                                engine_type="Nmt", engine_id=engine_id, segment=text
                            ),
                            metadata=metadata,
                            timeout=60,
                        )
                    ),
                ),
                (
                    "gRPC TranslatePrefix",
                    lambda: over_grpc(
                        lambda: stub.TranslatePrefix(
                            engine_pb2.TranslatePrefixRequest(
                                engine_type="Nmt", engine_id=engine_id, segment=text, prefix="Na", n=2
                            ),
                            metadata=metadata,
                            timeout=60,
                        )
                    ),
                ),
                (
                    "gRPC TrainSegmentPair",
                    lambda: over_grpc(
                        lambda: stub.TrainSegmentPair(
                            engine_pb2.TrainSegmentPairRequest(
                                engine_type="Nmt",
                                engine_id=engine_id,
                                source_segment=source,
                                target_segment=target,
                                sentence_start=True,
                            ),
                            metadata=metadata,
                            timeout=60,
                        )
                    ),
                ),
            ]
            kind, call = kinds[index % len(kinds)]
            failed_before = tally.failed
            call()
            with lock:
                by_kind[kind] += 1
                if tally.failed != failed_before:
                    failed_by_kind[kind] += 1

        def rest_call(http: httpx.Client, path: str, body: Any) -> None:
            send_with_retries([http], "POST", path, tally, json=body, policy=NO_RETRIES)

        with RssSampler(api.pid, node.pid) as sampler:
            load = Load(send, total=MAX_REQUESTS, threads=CLIENTS, duration_s=SOAK_S, pause_s=PAUSE_S).start()
            load.join(SOAK_S + 120)
        samples = sampler.samples
    finally:
        for c in [rest, *clients]:
            c.close()
        for channel in channels:
            channel.close()
        node_code = processes.stop(node)
        api_code = processes.stop(api)
        print((tmp_path / "node.log").read_text()[-1500:], (tmp_path / "api.log").read_text()[-1500:])

    steady = [s for s in samples if s.at_s >= WARM_UP_S]
    assert len(steady) >= 6, f"too few samples after the warm-up: {len(samples)} in all"
    rows = []
    growth = {}
    rate = tally.sent / max(1.0, samples[-1].at_s - samples[0].at_s)
    between_thirds = rate * (steady[-1].at_s - steady[0].at_s) * 2 / 3  # from middle to middle
    for name in ("api", "node"):
        values = [getattr(s, name) for s in steady]
        first, last = thirds(values)
        growth[name] = last - first
        per_1000 = growth[name] / max(1.0, between_thirds) * 1000
        rows.append(
            f"  {name:5} start {getattr(samples[0], name) / MIB:7.1f}  first third {first / MIB:7.1f}  "
            f"last third {last / MIB:7.1f}  max {max(values) / MIB:7.1f}  growth {growth[name] / MIB:+6.1f} MiB"
            f"  ({per_1000 / 1024:+.1f} KiB per 1000 requests)"
        )
    print(
        f"\nsoak {SOAK_S:g} s, {CLIENTS} clients: {tally.summary()}; {len(samples)} RSS samples "
        f"({len(steady)} after a {WARM_UP_S:g} s warm-up), MiB:"
    )
    print("\n".join(rows))
    print("  requests: " + ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items())))
    if failed_by_kind:
        print("  failed: " + ", ".join(f"{kind} {count}" for kind, count in sorted(failed_by_kind.items())))
    assert tally.failed == 0, tally.failures[:5]
    assert tally.sent == tally.answered == load.begun
    assert (node_code, api_code) == (0, 0)
    for name, grew in growth.items():
        assert grew < GROWTH_BOUND_BYTES, f"the {name}'s memory grew {grew / MIB:.1f} MiB during the soak"
