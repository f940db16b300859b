"""`python -m bench`: every scenario of the serving benchmark, printed as one table per model and
written as JSON (see bench/README.md for what each row means)."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import baselines, lifecycle, pinning, shared_weights
from bench.clients import GrpcClient, Outcome, RestClient, SilConvertersClient, closed_loop
from bench.profiling import Profiler
from bench.report import Measurement, print_lifecycle, print_shared_weights, print_table, write_json
from bench.system import NodeFigures, System, running_system
from bench.workload import SOURCE_CODE, TARGET_CODE, Workload, verses
from serval_common.manifest import TRAINING_CHECKPOINT, fetch_folder
from serval_common.settings import NodeSettings, Settings
from serval_common.store import store_from_settings

console = Console(stderr=True)
SWAP_CLIENTS = 8
TEXT_ONLY = "SIL Converters (text only)"
"""The full path of a dialect that reads the translation only: no confidences, no alignment."""
MEMORY_EXTRA_MODELS = 2


@dataclass(frozen=True)
class ModelPlan:
    """How much of each scenario a model gets, so the whole suite fits in minutes on 2 cores."""

    name: str
    sentences: int
    single_requests: int
    naive_requests: int
    transformers_requests: int
    max_decoding_length: int | None = None
    """Random weights never stop on their own: every verse decodes to this many tokens."""


PLANS = {
    "tiny": ModelPlan("tiny-nllb", sentences=512, single_requests=128, naive_requests=128, transformers_requests=128),
    "600m": ModelPlan(
        "nllb-600m-shape", sentences=64, single_requests=6, naive_requests=6, transformers_requests=4,
        max_decoding_length=40,
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Cores:
    """Where each part runs (`--pin`); None: wherever the kernel puts it."""

    baseline: set[int] | None = None
    node: set[int] | None = None
    api: set[int] | None = None
    clients: set[int] | None = None

    @classmethod
    def pinned(cls) -> Cores:
        if not pinning.available():
            raise SystemExit("--pin needs Linux and at least two cores")
        node, service = {pinning.NODE_CORE}, {pinning.SERVICE_CORE}
        return cls(baseline=node, node=node, api=service, clients=service)

    def pin(self, system: System) -> None:
        if self.node is not None:
            pinning.pin(system.node.pid, self.node)
        if self.api is not None:
            pinning.pin(system.api.pid, self.api)


def ensure_model(key: str, settings: Settings) -> None:
    if key == "tiny":
        from serval_cli.demo import ensure_base_model

        ensure_base_model(settings, steps=1000, rebuild=False)
    else:
        from bench.models import ensure_nllb_600m_shape

        ensure_nllb_600m_shape(store_from_settings(settings))


def run_model(
    key: str, args: argparse.Namespace, settings: Settings, tmp: Path
) -> tuple[list[Measurement], dict[str, Any]]:
    plan = PLANS[key]
    if args.sentences:
        plan = replace(plan, sentences=args.sentences)
    ensure_model(key, settings)
    node = NodeSettings(intra_threads=args.intra_threads, device=args.device)
    if plan.max_decoding_length:
        node = node.model_copy(update={"max_decoding_length": plan.max_decoding_length})
    store = store_from_settings(settings)
    prefix = f"base-models/{plan.name}"
    manifest, folder = fetch_folder(store, prefix, tmp / "models", with_checkpoint=True)
    workload = Workload(plan.name, folder, verses(plan.sentences), node, manifest.max_positions)
    rows: list[Measurement] = []

    def record(row: Measurement) -> None:
        rows.append(row)
        console.print(
            f"  {row.scenario}: {row.sentences_per_s:.2f} sentences/s, {row.tokens_per_s:.0f} tokens/s"
        )

    console.rule(
        f"{plan.name}: {len(workload.sentences)} verses, beam {node.beam_size}, intra_threads {node.intra_threads}"
    )
    cores = Cores.pinned() if args.pin else Cores()
    with pinning.this_process_on(cores.baseline):
        first_direct = baselines.direct(workload)
        record(baselines.direct_with_confidences(workload))
        record(baselines.naive(workload, plan.naive_requests))
        record(baselines.naive_with_confidences(workload, plan.naive_requests))
        if not args.no_transformers:
            record(
                baselines.transformers_generate(
                    workload, str(folder / TRAINING_CHECKPOINT), plan.transformers_requests
                )
            )
    models: dict[str, Any] = {}
    with running_system(tmp / f"home-{key}", settings.resolved_store_url, node, dict(args.env)) as system:
        cores.pin(system)
        base_rss = system.node_rss_bytes()
        engine_id = system.create_engine(plan.name)
        text_key = system.bound_key(engine_id)
        for transport in ("gRPC", "REST", TEXT_ONLY):
            for clients in args.clients:
                count = min(
                    plan.single_requests if clients == 1 else len(workload.sentences), len(workload.sentences)
                )
                profile = args.profile if transport == "gRPC" and clients == max(args.clients) else None
                with pinning.this_process_on(cores.clients):
                    record(
                        full_path(system, engine_id, workload, transport, clients, count, profile, text_key)
                    )
        console.print(f"  idle for {lifecycle.IDLE_S:g} s")
        models["idle"] = lifecycle.idle_cpu(system)
        console.print(f"  {', '.join(map(str, args.engines))} engines on one base model")
        with pinning.this_process_on(cores.clients):
            models["shared_weights"] = shared_weights.k_engines(
                system, plan.name, engine_id, workload, args.engines, args.shared_clients
            )
        copies = [
            lifecycle.distinct_base_model(store, folder, plan.name, f"copy{i}")
            for i in range(1 + MEMORY_EXTRA_MODELS)
        ]
        console.print("  hot swap under load (to a copy of the weights: a fetch and a load)")
        models["hot_swap"] = lifecycle.hot_swap(system, engine_id, copies[0], workload, SWAP_CLIENTS)
        console.print("  node memory")
        models["memory"] = lifecycle.memory(system, base_rss, copies[1:], folder)
    console.print("  cold load from S3 (moto)")
    models["cold_load_s3"] = lifecycle.cold_load_from_s3(workload, store, prefix, tmp / f"s3-{key}")
    with pinning.this_process_on(cores.baseline):
        last_direct = baselines.direct(workload)
    direct = replace(
        first_direct,
        scenario="direct (translate_batch, all verses; mean of a run before and after)",
        seconds=(first_direct.seconds + last_direct.seconds) / 2,
    )
    record(direct)
    rows.insert(0, rows.pop())
    models["direct_runs_tokens_per_s"] = [first_direct.tokens_per_s, last_direct.tokens_per_s]
    return rows, models  # fmt: skip


def full_path(
    system: System,
    engine_id: str,
    workload: Workload,
    transport: str,
    clients: int,
    count: int,
    profile_dir: Path | None,
    text_key: str | None = None,
) -> Measurement:
    async def run() -> tuple[Outcome, NodeFigures, dict[str, float]]:
        client: GrpcClient | RestClient | SilConvertersClient
        if transport == "gRPC":
            client = GrpcClient(system.grpc_target, system.api_key, engine_id)
        elif transport == TEXT_ONLY:
            client = SilConvertersClient(system.rest_url, text_key or "", clients, SOURCE_CODE, TARGET_CODE)
        else:
            client = RestClient(system.rest_url, system.api_key, engine_id, clients)
        await client.send(workload.sentences[0])
        before = system.node_figures()
        cpu_before = system.cpu_seconds()
        with Profiler(
            profile_dir,
            {"api": system.api.pid, "node": system.node.pid},
            label=f"{workload.name}-{transport}-{clients}",
        ):
            outcome = await closed_loop(client.send, workload.sentences[:count], clients)
        cpu = {name: spent - cpu_before[name] for name, spent in system.cpu_seconds().items()}
        await client.close()
        return outcome, before, cpu

    outcome, before, cpu = asyncio.run(run())
    figures = system.node_figures() - before
    if outcome.errors:
        console.print(f"  [red]{outcome.failed} failed[/]: {outcome.errors}")
    return Measurement(
        workload.name, f"full path, {transport}, {clients} clients", count, outcome.seconds,
        int(figures.target_tokens), figures.batched_requests / figures.batches if figures.batches else 0.0,
        outcome.latencies_s, outcome.failed, cpu_s=cpu, engine_s=figures.engine_s,
    )  # fmt: skip


def _assignment(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return name, value


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--models", nargs="+", choices=sorted(PLANS), default=["tiny", "600m"])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--intra-threads", type=int, default=NodeSettings().intra_threads)
    parser.add_argument(
        "--device", default="auto", help="the node's and the baselines' device: auto, cpu or cuda"
    )
    parser.add_argument("--home", type=Path, default=Path(".serval"), help="where the base models are kept")
    parser.add_argument("--out", type=Path, default=Path("bench/results/serving.json"))
    parser.add_argument(
        "--sentences", type=int, help="verses per throughput scenario (default: the model's plan)"
    )
    parser.add_argument(
        "--env",
        type=_assignment,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the API service and node, e.g. SERVAL_API__LOOKUP_CACHE_S=0 (repeatable)",
    )
    parser.add_argument("--no-transformers", action="store_true", help="skip the Hugging Face baseline")
    parser.add_argument(
        "--engines",
        type=int,
        nargs="+",
        default=[1, 10, 100],
        help="the K of the scenario 'K engines on one base model' (inference-only engines)",
    )
    parser.add_argument(
        "--shared-clients", type=int, default=32, help="closed-loop clients of the K-engines scenario"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the node on core 0, the API service and the clients on core 1, each baseline on core 0",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy the API service and node at the most gRPC clients, into this folder",
    )
    args = parser.parse_args()

    settings = Settings(home=args.home)
    rows: list[Measurement] = []
    models: dict[str, Any] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="serval-bench-") as tmp:
        for key in args.models:
            model_rows, models[PLANS[key].name] = run_model(key, args, settings, Path(tmp))
            rows.extend(model_rows)
    out = Console(width=220)
    print_table(rows, out)
    print_lifecycle(models, out)
    print_shared_weights(models, out)
    extra = {
        "pinned": args.pin,
        "intra_threads": args.intra_threads,
        "clients": args.clients,
        "wall_s": time.monotonic() - started,
        "models": models,
    }
    write_json(args.out, rows, extra)
    console.print(f"written to {args.out} in {extra['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
