"""What a bare gRPC unary call costs the server, in CPU: the floor under the API service's own cost
per gRPC request (the serving benchmark's goal is 0.5 ms of API CPU a request, and each request is
one call from the client and one round trip on the node's stream).

An echo server (a 200-byte message each way) in a process of its own answers serial calls from a
plain `grpc` client in this process; the figure is the server process's user + system CPU over the
calls, divided by their number, with the mean wall time of a call beside it. Servers: `grpc.aio`
(what the API service runs) and `grpc`'s thread-pool server, for unary calls and for turns on one
open bidirectional stream (a message each way, as on the node's stream), each as-is and under every `--env`
variant given (gRPC reads its environment at import, so each server gets it at its start). The
servers alternate within each run, so they share the VM's drift.

    .venv/bin/python -m bench.grpc_floor [--runs 3] [--calls 3000] [--env GRPC_EXPERIMENTS=fuse_filters …]
                                         [--pin] [--out bench/results/grpc_floor.json]

`--pin` puts the server on core 0 and this process on core 1, as the serving benchmark's `--pin`
does. Traffic goes to 127.0.0.1 only; about 5 s a server and run on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.pinning import NODE_CORE, SERVICE_CORE, available, pin, this_process_on  # noqa: E402
from serval_cli.processes import free_port  # noqa: E402

UNARY, STREAM = "/bench.Echo/Echo", "/bench.Echo/Stream"
MESSAGE = b"x" * 200
WARM_UP_CALLS = 300

SERVER = r"""
import asyncio, sys
from concurrent import futures
import grpc

def same(b): return b
kind, port = sys.argv[1], sys.argv[2]
if kind == "aio":
    async def echo(request, context): return request
    async def stream(requests, context):
        async for request in requests:
            yield request
    async def main():
        handler = grpc.method_handlers_generic_handler("bench.Echo", {
            "Echo": grpc.unary_unary_rpc_method_handler(echo, request_deserializer=same, response_serializer=same),
            "Stream": grpc.stream_stream_rpc_method_handler(stream, request_deserializer=same, response_serializer=same)})
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port("127.0.0.1:" + port)
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()
    asyncio.run(main())
else:
    def stream(requests, context):
        yield from requests
    handler = grpc.method_handlers_generic_handler("bench.Echo", {
        "Echo": grpc.unary_unary_rpc_method_handler(lambda r, c: r, request_deserializer=same, response_serializer=same),
        "Stream": grpc.stream_stream_rpc_method_handler(stream, request_deserializer=same, response_serializer=same)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("127.0.0.1:" + port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid`, all its threads."""
    return float(sum(psutil.Process(pid).cpu_times()[:2]))


def measure(kind: str, env: dict[str, str], calls: int, pinned: bool, stream: bool) -> tuple[float, float]:
    """(server CPU ms per call, wall ms per call) for one server of `kind` under `env`: unary calls,
    or with `stream` round trips of one message each way on one bidirectional stream."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, kind, str(port)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        if pinned:
            pin(server.pid, {NODE_CORE})
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = round_trip(channel, stream)
            for _ in range(WARM_UP_CALLS):
                call()
            cpu_before, started = cpu_seconds(server.pid), time.perf_counter()
            for _ in range(calls):
                call()
            wall, cpu = time.perf_counter() - started, cpu_seconds(server.pid) - cpu_before
        return cpu / calls * 1e3, wall / calls * 1e3
    finally:
        server.kill()
        server.wait()


def round_trip(channel: grpc.Channel, stream: bool) -> Callable[[], object]:
    """One message to the server and its echo back: a unary call, or a turn on one open stream (as
    a request and its answer travel on the node's stream)."""
    if not stream:
        unary = channel.unary_unary(UNARY)
        return lambda: unary(MESSAGE)
    outgoing: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    answers = channel.stream_stream(STREAM)(iter(outgoing.get, None))

    def turn() -> object:
        outgoing.put(MESSAGE)
        return next(answers)

    return turn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="a variant (repeatable)"
    )
    parser.add_argument("--pin", action="store_true", help="server on core 0, client on core 1")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "grpc_floor.json")
    args = parser.parse_args(argv)
    pinned = args.pin and available()
    variants = {"": {}} | {v: dict([v.split("=", 1)]) for v in args.env}
    servers = [
        (kind, stream, name, env)
        for name, env in variants.items()
        for stream in (False, True)
        for kind in ("aio", "sync")
    ]

    def named(kind: str, stream: bool, name: str) -> str:
        return f"{kind} {'stream turn' if stream else 'unary call'} {name}".strip()

    figures: dict[str, list[tuple[float, float]]] = {named(k, s, n): [] for k, s, n, _ in servers}
    with this_process_on({SERVICE_CORE} if pinned else None):
        for run in range(args.runs):
            for kind, stream, name, env in servers:
                figures[named(kind, stream, name)].append(measure(kind, env, args.calls, pinned, stream))
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    width = max(len(label) for label in figures)
    print(f"{'server':{width}} {'CPU ms/call (runs)':>26} {'wall ms/call':>13}")
    for label, runs in figures.items():
        cpu = [c for c, _ in runs]
        shown = f"{statistics.mean(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f})"
        print(f"{label:{width}} {shown:>26} {statistics.mean(w for _, w in runs):>13.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = {label: [{"cpu_ms": c, "wall_ms": w} for c, w in runs] for label, runs in figures.items()}
    args.out.write_text(json.dumps({"calls": args.calls, "pinned": pinned, "servers": rows}, indent=2))


if __name__ == "__main__":
    main()
