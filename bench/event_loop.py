"""The event loop's share of the serving path: one gRPC client sends verses one after another to an
API service and a node that both run on asyncio's own loop, then on uvloop (`SERVAL_EVENT_LOOP`),
in alternating order, each pair in the same run. Prints the API service's and the node's CPU
milliseconds per request and the p50 latency for each, and their means.

    .venv/bin/python -m bench.event_loop [--pairs 4] [--requests 600] [--home .serval] [--out FILE]

Pinned as `python -m bench --pin` pins: the node on one core, the API service and the client on
the other. The tiny base model is built into `{home}/store` on first use (as `serval demo` does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench import pinning
from bench.clients import GrpcClient
from bench.system import running_system
from bench.workload import verses
from serval_cli.demo import ensure_base_model
from serval_common.settings import NodeSettings, Settings

BASE_MODEL = "tiny-nllb"
LOOPS = ("asyncio", "uvloop")
console = Console(stderr=True)


def measure(event_loop: str, settings: Settings, sentences: list[str], home: Path) -> dict[str, float]:
    """CPU per request of each process and the p50, over `sentences` sent serially after a warm-up
    pass over the same sentences."""
    extra_env = {"SERVAL_EVENT_LOOP": event_loop}
    with running_system(home, settings.resolved_store_url, NodeSettings(), extra_env) as system:
        pinning.pin(system.node.pid, {pinning.NODE_CORE})
        pinning.pin(system.api.pid, {pinning.SERVICE_CORE})
        engine_id = system.create_engine(BASE_MODEL)

        async def serial() -> tuple[list[float], dict[str, float], dict[str, float]]:
            client = GrpcClient(system.grpc_target, system.api_key, engine_id)
            for sentence in sentences:
                await client.send(sentence)
            before, latencies = system.cpu_seconds(), []
            for sentence in sentences:
                started = time.perf_counter()
                await client.send(sentence)
                latencies.append(time.perf_counter() - started)
            after = system.cpu_seconds()
            await client.close()
            return latencies, before, after

        with pinning.this_process_on({pinning.SERVICE_CORE}):
            latencies, before, after = asyncio.run(serial())
    per_request = {
        f"{name}_cpu_ms": 1000 * (after[name] - before[name]) / len(sentences) for name in ("api", "node")
    }
    return {**per_request, "p50_ms": 1000 * statistics.median(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--home", type=Path, default=Path(".serval"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/event_loop.json"))
    args = parser.parse_args()
    if not pinning.available():
        raise SystemExit(
            "this benchmark pins the node and the API service to a core each: it needs two cores"
        )
    settings = Settings(home=args.home)
    ensure_base_model(settings, steps=1000, rebuild=False)
    sentences = verses(args.requests)
    runs: dict[str, list[dict[str, float]]] = {loop: [] for loop in LOOPS}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for loop in LOOPS if pair % 2 == 0 else LOOPS[::-1]:
                figures = measure(loop, settings, sentences, Path(tmp) / f"home-{pair}-{loop}")
                runs[loop].append(figures)
                console.print(
                    f"  pair {pair + 1}, {loop}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items())
                )
    table = Table(title=f"{args.requests} serial gRPC requests, {args.pairs} pairs: mean (min–max)")
    table.add_column("figure")
    for loop in LOOPS:
        table.add_column(loop, justify="right")
    for figure in runs[LOOPS[0]][0]:
        cells = []
        for loop in LOOPS:
            values = [run[figure] for run in runs[loop]]
            cells.append(f"{statistics.mean(values):.3f} ({min(values):.3f}–{max(values):.3f})")
        table.add_row(figure, *cells)
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"requests": args.requests, "runs": runs}, indent=2) + "\n", encoding="utf-8"
    )
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
