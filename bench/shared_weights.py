"""K engines on one base model: the main use of the service is many engines, each an inference-only
build of the same NLLB base model (one per user, project or language pair). A node holds those
weights once and batches every engine's requests together, so spreading C clients over K engines
should cost nothing against C clients on one engine.

For each K: C closed-loop gRPC clients send every verse once, request i to engine i mod K, against
the same clients all on one engine (run before and after, mean taken); the node's resident memory
after serving K engines; the mean batch size and distinct engines per batch (node metrics); and the
first request of an engine no node has served yet (its weights loaded under other engines) against
warm requests, with the node's model loads counted (none expected)."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.clients import GrpcClient, closed_loop
from bench.system import System
from bench.workload import Workload

MB = 1024 * 1024
WARM_REQUESTS = 20


def k_engines(
    system: System, base_model: str, engine_id: str, workload: Workload, ks: list[int], clients: int
) -> dict[str, Any]:
    engines = [engine_id]
    while len(engines) < max(ks):
        engines.append(system.create_engine(base_model))
    sentences = workload.sentences

    async def throughput(ids: list[str]) -> tuple[float, float, float, float]:
        """(sentences/s, target tokens/s, mean batch, engines per batch)."""
        client = GrpcClient(system.grpc_target, system.api_key, ids)
        before = system.node_figures()
        outcome = await closed_loop(client.send, sentences, clients)
        figures = system.node_figures() - before
        await client.close()
        if outcome.failed:
            raise RuntimeError(f"{outcome.failed} requests failed: {outcome.errors}")
        batches = figures.batches or 1
        return (
            len(sentences) / outcome.seconds,
            figures.target_tokens / outcome.seconds,
            figures.batched_requests / batches,
            figures.batch_engines / batches,
        )

    async def first_and_warm(new_engine: str) -> tuple[float, float, float]:
        """(first request of `new_engine` s, median warm request s, loads during the first)."""
        warm_client = GrpcClient(system.grpc_target, system.api_key, [engine_id])
        warm = []
        for sentence in sentences[:WARM_REQUESTS]:
            started = time.perf_counter()
            await warm_client.send(sentence)
            warm.append(time.perf_counter() - started)
        await warm_client.close()
        client = GrpcClient(system.grpc_target, system.api_key, [new_engine])
        loads_before = system.node_figures().loads
        started = time.perf_counter()
        await client.send(sentences[0])
        first = time.perf_counter() - started
        loads = system.node_figures().loads - loads_before
        await client.close()
        return first, statistics.median(warm), loads

    async def run() -> dict[str, Any]:
        await throughput([engine_id])  # warm: the batcher's timing and the first batch's memory
        one_before = await throughput([engine_id])
        rows: list[dict[str, Any]] = []
        served = 1
        for k in ks:
            first_s: float | None = None
            warm_s: float | None = None
            loads: float | None = None
            if k > served:
                first_s, warm_s, loads = await first_and_warm(engines[served])
            spread = await throughput(engines[:k])
            served = max(served, k)
            rows.append(
                {
                    "engines": k,
                    "sentences_per_s": spread[0],
                    "tokens_per_s": spread[1],
                    "mean_batch": spread[2],
                    "engines_per_batch": spread[3],
                    "node_rss_mb": system.node_rss_bytes() / MB,
                    "new_engine_first_request_s": first_s,
                    "warm_request_s": warm_s,
                    "loads_for_new_engine": loads,
                }
            )
        one_after = await throughput([engine_id])
        one_engine = (one_before[1] + one_after[1]) / 2
        for row in rows:
            row["vs_one_engine"] = row["tokens_per_s"] / one_engine
        return {
            "clients": clients,
            "one_engine_tokens_per_s": [one_before[1], one_after[1]],
            "one_engine_mean_batch": (one_before[2] + one_after[2]) / 2,
            "rows": rows,
        }

    return asyncio.run(run())
