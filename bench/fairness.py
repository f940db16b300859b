"""Issue 37's measure of fair batching: one owner's flood beside another owner's single requests,
on 127.0.0.1 only, against an API service process and `--nodes` node processes (SQLite; the tiny
base model; `bench/tenants.py`'s system and clients).

Owners A, B, C and D each have an inference-only engine on the tiny base model (one copy of the
weights per node). Each round measures, for `--seconds` each:

- **A alone**: A's single translate requests one after another (p50, p95);
- **B alone**: `--clients` closed-loop clients on B's key (B's answers per second);
- **B's flood**: the same beside A's single requests (A's p50 and p95, B's answers per second);
- **the flood split over three owners**: B, C and D share `--clients` clients, beside A.

Rounds repeat `--repeats` times and each figure is the median over the rounds, so that a round
the machine spent elsewhere does not decide it. The ratios are the issue's goal: A's p50 beside
the flood ≤ 2× A alone, p95 ≤ 3×, and B keeps ≥ 0.85 of its throughput alone.

    .venv/bin/python -m bench.fairness [--seconds 10] [--repeats 3] [--clients 32] [--nodes 1]
                                       [--home .serval] [--out bench/results/fairness.json]

Compare releases by running it on each checkout on the same machine, one after the other (the
closing note of issue 37 gives main before and after). About `4 × seconds × repeats` plus a
minute of set-up.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.system import NodeFigures
from bench.tenants import (
    Service,
    a_requests,
    cpu_used,
    hostile_load,
    new_key,
    running,
    served_engine,
    summary,
)
from serval_cli.admin import with_db

console = Console(stderr=True)
FLOOD_OWNERS = ("tenant-b", "tenant-c", "tenant-d")
WARM_UP_S = 2.0


def flood(
    service: Service, engines: dict[str, str], clients: dict[str, int], seconds: float, a_engine: str | None
) -> dict[str, Any]:
    """`clients[owner]` closed-loop clients per owner (a process each) for `seconds` after a
    warm-up; A's single requests meanwhile when `a_engine` is given."""
    context = multiprocessing.get_context("spawn")
    outs = {owner: context.Queue() for owner in clients}
    loads = [
        context.Process(
            target=hostile_load,
            args=(
                service.rest_url,
                service.keys[owner][1],
                engines[owner],
                count,
                seconds + WARM_UP_S,
                False,
                outs[owner],
            ),
        )
        for owner, count in clients.items()
    ]
    for load in loads:
        load.start()
    time.sleep(WARM_UP_S)
    figures: dict[str, Any] = {}
    cpu_before, node_before = service.system.cpu_seconds(), service.system.node_figures()
    if a_engine is not None:
        figures.update(summary(a_requests(service, a_engine, seconds)))
    else:
        time.sleep(seconds)
    figures.update(cpu_used(service, cpu_before, seconds))
    figures.update(batches(service.system.node_figures() - node_before))
    counts = {owner: out.get(timeout=120) for owner, out in outs.items()}
    for load in loads:
        load.join(30)
    total_s = seconds + WARM_UP_S
    figures["flood_clients_cores"] = sum(c["cpu_s"] for c in counts.values()) / total_s
    figures["flood_ok_per_s"] = sum(c["ok"] for c in counts.values()) / total_s
    figures["flood_failed"] = sum(c["refused"] + c["other"] for c in counts.values())
    figures["per_owner_ok_per_s"] = {owner: c["ok"] / total_s for owner, c in counts.items()}
    return figures


def batches(node: NodeFigures) -> dict[str, float]:
    """The first node's batches over a phase: their mean size and backend time."""
    count = max(node.batches, 1.0)
    return {"batch_size": node.batched_requests / count, "batch_ms": node.engine_s / count * 1000}


def split(clients: int) -> dict[str, int]:
    """`clients` shared by the three flooding owners as evenly as they divide."""
    return {owner: clients // 3 + (i < clients % 3) for i, owner in enumerate(FLOOD_OWNERS)}


def one_round(service: Service, engines: dict[str, str], clients: int, seconds: float) -> dict[str, Any]:
    a_engine = engines["tenant-a"]
    cpu_before, node_before = service.system.cpu_seconds(), service.system.node_figures()
    a_alone = {
        **summary(a_requests(service, a_engine, seconds)),
        **cpu_used(service, cpu_before, seconds),
        **batches(service.system.node_figures() - node_before),
        "flood_clients_cores": 0.0,
    }
    return {
        "a_alone": a_alone,
        "b_alone": flood(service, engines, {"tenant-b": clients}, seconds, None),
        "b_flood": flood(service, engines, {"tenant-b": clients}, seconds, a_engine),
        "split_flood": flood(service, engines, split(clients), seconds, a_engine),
    }


def median_of(rounds: list[dict[str, Any]], phase: str, figure: str) -> float:
    return statistics.median(r[phase][figure] for r in rounds)


CORES = ("api_cores", "node_cores", "clients_cores", "flood_clients_cores")
BATCHES = ("batch_size", "batch_ms")


def cores(rounds: list[dict[str, Any]], phase: str) -> dict[str, float]:
    """CPU seconds per second of the API service, the nodes, A's client and the flood's clients."""
    return {name: median_of(rounds, phase, name) for name in (*CORES, *BATCHES)}


def shown_cores(row: dict[str, Any]) -> str:
    return " / ".join(f"{row[name]:.2f}" for name in CORES)


def shown_batches(row: dict[str, Any]) -> str:
    return f"{row['batch_size']:.1f} verses, {row['batch_ms']:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; figures are medians over them")
    parser.add_argument("--clients", type=int, default=32, help="the flood's closed-loop clients")
    parser.add_argument("--nodes", type=int, default=1, help="node processes serving the engines")
    parser.add_argument("--home", type=Path, default=Path(".serval"), help="where the base model is kept")
    parser.add_argument("--out", type=Path, default=Path("bench/results/fairness.json"))
    args = parser.parse_args()
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="serval-fairness-") as folder,
        running(Path(folder), args.home, nodes=args.nodes) as service,
    ):
        for owner in FLOOD_OWNERS[1:]:
            service.keys[owner] = with_db(service.home, service.url, functools.partial(new_key, owner=owner))
        engines = {owner: served_engine(service, owner) for owner in ("tenant-a", *FLOOD_OWNERS)}
        rounds = []
        for i in range(args.repeats):
            console.print(f"round {i + 1} of {args.repeats}")
            rounds.append(one_round(service, engines, args.clients, args.seconds))
    a_p50 = median_of(rounds, "a_alone", "a_p50_ms")
    a_p95 = median_of(rounds, "a_alone", "a_p95_ms")
    b_alone = median_of(rounds, "b_alone", "flood_ok_per_s")
    figures: dict[str, Any] = {
        "a_alone": {"a_p50_ms": a_p50, "a_p95_ms": a_p95, **cores(rounds, "a_alone")},
        "b_alone": {"ok_per_s": b_alone, **cores(rounds, "b_alone")},
    }
    for phase in ("b_flood", "split_flood"):
        p50, p95 = median_of(rounds, phase, "a_p50_ms"), median_of(rounds, phase, "a_p95_ms")
        ok = median_of(rounds, phase, "flood_ok_per_s")
        figures[phase] = {
            "a_p50_ms": p50,
            "a_p95_ms": p95,
            "ok_per_s": ok,
            "a_p50_ratio": p50 / a_p50,
            "a_p95_ratio": p95 / a_p95,
            "throughput_ratio": ok / b_alone,
            "failed": sum(r[phase]["flood_failed"] for r in rounds),
            **cores(rounds, phase),
        }
    result = {
        "figures": figures,
        "rounds": rounds,
        "clients": args.clients,
        "nodes": args.nodes,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "wall_s": time.monotonic() - began,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))

    table = Table(
        "phase",
        "A p50 ms (× alone)",
        "A p95 ms (× alone)",
        "flood answers/s (× B alone)",
        "failed",
        "cores: API / nodes / A / flood",
        "node 1's mean batch",
        box=None,
        header_style="bold",
        title=f"{args.nodes} node(s), {args.clients} clients, median of {args.repeats} × {args.seconds:g} s",
    )
    table.add_row(
        "A alone",
        f"{a_p50:.1f}",
        f"{a_p95:.1f}",
        "",
        "",
        shown_cores(figures["a_alone"]),
        shown_batches(figures["a_alone"]),
    )
    table.add_row(
        "B alone",
        "",
        "",
        f"{b_alone:.0f}",
        "",
        shown_cores(figures["b_alone"]),
        shown_batches(figures["b_alone"]),
    )
    for phase, name in (("b_flood", "B's flood beside A"), ("split_flood", "B, C, D's flood beside A")):
        row = figures[phase]
        table.add_row(
            name,
            f"{row['a_p50_ms']:.1f} (×{row['a_p50_ratio']:.2f})",
            f"{row['a_p95_ms']:.1f} (×{row['a_p95_ratio']:.2f})",
            f"{row['ok_per_s']:.0f} (×{row['throughput_ratio']:.2f})",
            str(row["failed"]),
            shown_cores(row),
            shown_batches(row),
        )
    Console(width=160).print(table)
    console.print(f"wrote {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
