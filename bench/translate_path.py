"""Translate throughput and latency: the full path (client → API service → node) over gRPC at
1, 8 and 32 concurrent clients, side by side with CTranslate2 called directly on the same model,
verses and thread settings, with the batch sizes the node's micro-batcher formed (read from the
node's own Prometheus metrics).

Run by hand (never as a timed test):  .venv/bin/python bench/translate_path.py [--sentences 96]
It reuses the tiny base model of `serval demo` (building it first if needed) and starts its own
API service and node on free loopback ports. Results are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ctranslate2
import grpc
from prometheus_client.parser import text_string_to_metric_families

from inference_gpu.nllb import NllbTokenizer
from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_cli.corpus import demo_pairs
from serval_cli.demo import BASE_MODEL, ensure_base_model
from serval_common.manifest import fetch_folder
from serval_common.settings import NodeSettings, Settings, StoreSettings
from serval_common.store import store_from_settings


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def direct(model_dir: Path, sentences: list[str]) -> dict[str, float]:
    node = NodeSettings()
    tokenizer = NllbTokenizer.from_folder(model_dir)
    translator = ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=node.intra_threads)
    sources = [tokenizer.encode(s, "eng_Latn").tokens for s in sentences]
    started = time.perf_counter()
    results = translator.translate_batch(
        sources,
        target_prefix=[["swh_Latn"]] * len(sources),
        beam_size=node.beam_size,
        max_batch_size=node.max_batch_size,
    )
    elapsed = time.perf_counter() - started
    tokens = sum(len(r.hypotheses[0]) - 1 for r in results)
    return {"sentences_per_s": len(sentences) / elapsed, "tokens_per_s": tokens / elapsed}


def batch_histogram(metrics_url: str) -> dict[float, float]:
    """Cumulative `serval_node_batch_size` bucket counts: upper bound → batches of at most that size."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "serval_node_batch_size":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets[float(sample.labels["le"])] = (
                        buckets.get(float(sample.labels["le"]), 0) + sample.value
                    )
    return buckets


def batch_distribution(before: dict[float, float], after: dict[float, float]) -> tuple[str, int]:
    """Batches per size bucket during one scenario, and the number of backend calls."""
    bounds = sorted(after)
    cumulative = [after[b] - before.get(b, 0) for b in bounds]
    counts = [c - (cumulative[i - 1] if i else 0) for i, c in enumerate(cumulative)]
    calls = int(cumulative[-1]) if cumulative else 0
    parts: list[str] = []
    low = 1.0
    for bound, count in zip(bounds, counts, strict=True):
        if count:
            label = (
                f"{low:g}"
                if low == bound
                else (f"{low:g}-{bound:g}" if bound != float("inf") else f">{low - 1:g}")
            )
            parts.append(f"{label}:{int(count)}")
        low = bound + 1
    return " ".join(parts), calls


def full_path(
    target: str, api_key: str, engine_id: str, sentences: list[str], clients: int
) -> dict[str, float]:
    channel = grpc.insecure_channel(target)
    stub = engine_pb2_grpc.TranslationEngineApiStub(channel)
    metadata = (("x-api-key", api_key),)

    def one(segment: str) -> tuple[float, int]:
        started = time.perf_counter()
        reply = stub.Translate(
            engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine_id, segment=segment, n=1),
            metadata=metadata,
            timeout=120,
        )
        return time.perf_counter() - started, len(reply.results[0].target_tokens)

    one(sentences[0])
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        timings = list(pool.map(one, sentences))
    elapsed = time.perf_counter() - started
    channel.close()
    latencies = [t for t, _ in timings]
    return {
        "sentences_per_s": len(sentences) / elapsed,
        "words_per_s": sum(n for _, n in timings) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * percentile(latencies, 0.95),
        "p99_ms": 1000 * percentile(latencies, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--home", type=Path, default=Path(".serval"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/translate_path.json"))
    args = parser.parse_args()

    shared = Settings(home=args.home)
    ensure_base_model(shared, steps=1000, rebuild=False)
    sentences = [p.source for p in demo_pairs()[1000 : 1000 + args.sentences]]
    with tempfile.TemporaryDirectory() as tmp:
        _, model_dir = fetch_folder(
            store_from_settings(shared),
            f"base-models/{BASE_MODEL}",
            Path(tmp) / "cache",
            with_checkpoint=False,
        )
        baseline = direct(model_dir, sentences)
        home = Path(tmp) / "home"
        settings = Settings(home=home, store=StoreSettings(url=shared.resolved_store_url))
        api_key, node_token = create_credentials(settings, "bench")
        grpc_port, rest_port = processes.free_port(), processes.free_port()
        env = {"SERVAL_STORE__URL": shared.resolved_store_url, "SERVAL_LOG_LEVEL": "WARNING"}
        api = processes.start(
            ["api", "--home", str(home), "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
            home / "api.log",
            env,
        )
        metrics_port = processes.free_port()
        node = processes.start(
            ["node", "--home", str(home), "--api-address", f"127.0.0.1:{grpc_port}"],
            home / "node.log",
            {**env, "SERVAL_NODE__TOKEN": node_token, "SERVAL_NODE__METRICS_PORT": str(metrics_port)},
        )
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        try:
            rest = processes.RestClient(f"http://127.0.0.1:{rest_port}", api_key)
            rest.wait_until_up(api)
            rest.wait_for_node(node)
            engine = rest.expect(
                201,
                "POST",
                "/api/v1/translation/engines",
                {"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"},
            )
            path = f"/api/v1/translation/engines/{engine['id']}"
            build = rest.expect(201, "POST", f"{path}/builds", {"trainOn": []})
            while build["state"] in ("Pending", "Active"):
                code, payload = rest.call(
                    "GET", f"{path}/builds/{build['id']}?min-revision={build['revision'] + 1}"
                )
                build = payload if code == 200 else build
            rows = {"direct (CTranslate2 translate_batch)": baseline}
            for clients in args.clients:
                before = batch_histogram(metrics_url)
                row = full_path(f"127.0.0.1:{grpc_port}", api_key, engine["id"], sentences, clients)
                distribution, calls = batch_distribution(before, batch_histogram(metrics_url))
                row["backend_calls"] = calls
                row["mean_batch"] = len(sentences) / calls if calls else 0.0
                row["batches"] = distribution  # type: ignore[assignment]
                rows[f"full path, gRPC, {clients} clients"] = row
        finally:
            processes.stop(node)
            processes.stop(api)

    base = baseline["sentences_per_s"]
    decoding = NodeSettings()
    print(
        f"{len(sentences)} verses, beam {decoding.beam_size}, intra_threads {decoding.intra_threads}, one node"
    )
    print(
        f"{'scenario':<38}{'sent/s':>8}{'vs direct':>10}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}"
        f"{'calls':>7}{'mean batch':>11}  batch sizes (size:batches)"
    )
    for name, row in rows.items():
        latency = "".join(
            f"{row[k]:>8.1f}" if k in row else f"{'':>8}" for k in ("p50_ms", "p95_ms", "p99_ms")
        )
        batches = (
            f"{row['backend_calls']:>7}{row['mean_batch']:>11.1f}  {row['batches']}"
            if "batches" in row
            else ""
        )
        print(
            f"{name:<38}{row['sentences_per_s']:>8.1f}{row['sentences_per_s'] / base:>9.0%} {latency}{batches}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sentences": len(sentences), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
