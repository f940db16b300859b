"""Which statistical aligner a `statistical` build uses: the Thot model types side by side on the
bundled English→Swahili New Testament.

    PYTHONPATH=. .venv/bin/python bench/alignment.py [--models hmm eflomal fast_align]
                 [--pairs 0] [--latency-pairs 300] [--out bench/results/alignment.json]
    PYTHONPATH=. .venv/bin/python bench/alignment.py --job [--models eflomal] [--pairs 0]

`--job` times whole builds instead (`build_jobs.job.run_build` training on every verse pair,
aligning every one as `word-align.json` rows, streaming them over gRPC to a platform server in
this process and publishing to a local model store).

For each model type it trains the symmetrized (direct + inverse, grow-diag-final-and) model the
build trains (`serval_common.thot_alignment.train`: Latin word tokenizer, lowercased) on every
verse pair, and measures:

- training time (both directions, one process; eflomal runs its sampler chains serially with a
  fixed seed, as the build does);
- align latency per pair: each of `--latency-pairs` verse pairs aligned alone by the node's
  `AlignmentModel.align` (worker thread included), median and p95; and per pair when the build
  aligns them in one batch;
- quality without a gold alignment:
  * direction agreement: |D ∩ I| / |D ∪ I| of the direct and inverse models' own alignments
    (two independently trained directions that agree are more often right);
  * name anchors: in each pair, a capitalized source word that is not the first word and a
    capitalized target word sharing at least its first 4 letters (Abraham/Abrahamu,
    Isaac/Isaka, Jerusalem/Yerusalemu fails on purpose: different letters), each unique in its
    verse, plus identical numbers. Recall: anchors the symmetrized alignment links; precision:
    of the links leaving an anchor's source word, the share that reach its target word;
  * cross-model agreement: F1 between each two models' symmetrized links on the same verses.

Scores (the link's translation probability) are summarised too: mean score of anchor links
against all links, since a score that means something is higher on the safe links.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2

from build_jobs.job import run_build
from inference_gpu.families.alignment import AlignmentModel
from serval.translation.v1 import platform_pb2_grpc
from serval.word_alignment.v1 import platform_pb2_grpc as wa_platform_pb2_grpc
from serval_common.jobs import WORD_ALIGN_INPUT, JobSpec
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings, Settings
from serval_common.store import open_store
from serval_common.thot_alignment import BACKEND, Aligned, AlignmentSettings, ModelType, ThotAligner, train
from tests.corpus import EBIBLE

DATA = EBIBLE


def verse_pairs(source: str = "engwebp", target: str = "swh1850") -> list[tuple[str, str]]:
    src = (DATA / f"{source}.txt").read_text(encoding="utf-8").splitlines()
    trg = (DATA / f"{target}.txt").read_text(encoding="utf-8").splitlines()
    return [
        (s.strip(), t.strip())
        for s, t in zip(src, trg, strict=True)
        if s.strip() and t.strip() and "<range>" not in (s.strip(), t.strip())
    ]


def anchors(aligned: Aligned) -> list[tuple[int, int]]:
    """(source index, target index) of the pair's safe links: names sharing 4 first letters, numbers."""
    src, trg = aligned.source_tokens, aligned.target_tokens

    def unique(tokens: list[str], token: str) -> bool:
        return tokens.count(token) == 1

    found: list[tuple[int, int]] = []
    for i, s in enumerate(src):
        if not unique(src, s):
            continue
        if s.isdigit():
            matches = [j for j, t in enumerate(trg) if t == s]
        elif i > 0 and s[:1].isupper() and len(s) >= 4 and s.isalpha():
            matches = [
                j for j, t in enumerate(trg) if j > 0 and t[:1].isupper() and t[:4].lower() == s[:4].lower()
            ]
        else:
            continue
        if len(matches) == 1 and unique(trg, trg[matches[0]]):
            found.append((i, matches[0]))
    return found


def quality(results: list[Aligned]) -> dict[str, float]:
    hits = total = out_links = out_hits = 0
    anchor_scores: list[float] = []
    all_scores = [link.score for r in results for link in r.links]
    for r in results:
        links = {(link.source_index, link.target_index): link.score for link in r.links}
        for i, j in anchors(r):
            total += 1
            if (i, j) in links:
                hits += 1
                anchor_scores.append(links[(i, j)])
            leaving = [k for k in links if k[0] == i]
            out_links += len(leaving)
            out_hits += sum(1 for k in leaving if k[1] == j)
    return {
        "anchors": total,
        "anchor_recall": hits / total if total else 0.0,
        "anchor_precision": out_hits / out_links if out_links else 0.0,
        "links_per_pair": len(all_scores) / len(results) if results else 0.0,
        "mean_score_all": statistics.fmean(all_scores) if all_scores else 0.0,
        "mean_score_anchor": statistics.fmean(anchor_scores) if anchor_scores else 0.0,
    }


def f1(a: list[Aligned], b: list[Aligned]) -> float:
    both = size_a = size_b = 0
    for x, y in zip(a, b, strict=True):
        lx = {(k.source_index, k.target_index) for k in x.links}
        ly = {(k.source_index, k.target_index) for k in y.links}
        both += len(lx & ly)
        size_a += len(lx)
        size_b += len(ly)
    return 2 * both / (size_a + size_b) if size_a + size_b else 0.0


MANIFEST = Manifest(kind="model-revision", backend=BACKEND, engine_id="bench", revision=1, build_id="bench")


async def node_latencies(model: AlignmentModel, pairs: list[tuple[str, str]]) -> list[float]:
    """Milliseconds per `AlignmentModel.align` call, one pair at a time, as the node runs them."""
    latencies: list[float] = []
    try:
        for source, target in pairs:
            t0 = time.perf_counter()
            await model.align(source, target)
            latencies.append((time.perf_counter() - t0) * 1000)
    finally:
        await model.close()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class _Platform(
    platform_pb2_grpc.TranslationPlatformApiServicer, wa_platform_pb2_grpc.WordAlignmentPlatformApiServicer
):
    """Both platform services for `--job`: take every report, count the streamed rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.completed: Any = None

    def BuildStarted(self, request: Any, context: Any) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    def UpdateBuildStatus(self, request: Any, context: Any) -> empty_pb2.Empty:
        print(f"  {request.progress:.2f} {request.message}", file=sys.stderr, flush=True)
        return empty_pb2.Empty()

    def BuildCompleted(self, request: Any, context: Any) -> empty_pb2.Empty:
        self.completed = request
        return empty_pb2.Empty()

    def BuildFaulted(self, request: Any, context: Any) -> empty_pb2.Empty:
        print(f"faulted: {request.message}", file=sys.stderr)
        return empty_pb2.Empty()

    def InsertWordAlignments(self, request_iterator: Any, context: Any) -> empty_pb2.Empty:
        self.rows += sum(1 for _ in request_iterator)
        return empty_pb2.Empty()

    def UpdateBuildExecutionData(self, request: Any, context: Any) -> empty_pb2.Empty:
        return empty_pb2.Empty()


def job(model_type: str, pairs: list[tuple[str, str]], work: Path) -> dict[str, float]:
    """A whole build through `build_jobs.job.run_build`: train on every pair, align every pair
    (`word-align.json`), stream the rows over gRPC to this process, publish to a local store."""
    store = open_store((work / "store").as_uri())
    store.write_bytes("builds/b1/train.src.txt", "\n".join(s for s, _ in pairs).encode())
    store.write_bytes("builds/b1/train.trg.txt", "\n".join(t for _, t in pairs).encode())
    rows = [
        {
            "corpusId": "c",
            "textId": "NT",
            "sourceRefs": [str(n)],
            "targetRefs": [str(n)],
            "source": s,
            "target": t,
        }
        for n, (s, t) in enumerate(pairs)
    ]
    store.write_bytes(f"builds/b1/{WORD_ALIGN_INPUT}", json.dumps(rows).encode())
    recorder = _Platform()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    platform_pb2_grpc.add_TranslationPlatformApiServicer_to_server(recorder, server)
    wa_platform_pb2_grpc.add_WordAlignmentPlatformApiServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    spec = JobSpec(
        build_id="b1",
        engine_id="e1",
        source_language="en",
        target_language="sw",
        revision=1,
        train=True,
        options_json=json.dumps({"modelType": model_type}),
        store_url=store.url,
        api_address=f"127.0.0.1:{port}",
        job_token="bench",
        engine_type="statistical",
    )
    began = time.monotonic()
    try:
        code = run_build(spec, Settings(home=work), threading.Event(), store=store)
    finally:
        server.stop(None)
    seconds = time.monotonic() - began
    if code != 0 or recorder.completed is None:
        raise RuntimeError(f"the build failed ({code})")
    return {
        "build_s": seconds,
        "rows_aligned": recorder.rows,
        "corpus_size": recorder.completed.corpus_size,
        "confidence": recorder.completed.confidence,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["hmm", "eflomal", "fast_align"])
    parser.add_argument("--pairs", type=int, default=0, help="training pairs (0: every verse pair)")
    parser.add_argument("--latency-pairs", type=int, default=300)
    parser.add_argument("--quality-pairs", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/alignment.json"))
    parser.add_argument(
        "--job", action="store_true", help="time whole builds (run_build) instead, one per model type"
    )
    args = parser.parse_args(argv)

    pairs = verse_pairs()
    if args.pairs:
        pairs = pairs[: args.pairs]
    if args.job:
        builds: dict[str, dict[str, float]] = {}
        for name in args.models:
            with tempfile.TemporaryDirectory(prefix="bench-align-job-") as work:
                builds[name] = job(name, pairs, Path(work))
            print(json.dumps({name: builds[name]}), file=sys.stderr, flush=True)
        print(f"whole builds on {len(pairs)} pairs (train on all, align all, stream, publish)")
        for name, build in builds.items():
            print(f"{name:12}" + "".join(f"  {key} {value:.1f}" for key, value in build.items()))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"pairs": len(pairs), "builds": builds}, indent=2))
        return 0
    step = max(1, len(pairs) // args.quality_pairs)
    quality_pairs = pairs[::step][: args.quality_pairs]
    lat_step = max(1, len(pairs) // args.latency_pairs)
    latency_pairs = pairs[::lat_step][: args.latency_pairs]
    figures: dict[str, dict[str, float]] = {}
    aligned: dict[str, list[Aligned]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-align-") as work:
        for name in args.models:
            model_type: ModelType = name
            print(f"training {name} on {len(pairs)} pairs…", file=sys.stderr, flush=True)
            folder = Path(work) / name
            trained = train(pairs, folder, AlignmentSettings(model_type=model_type))
            began = time.monotonic()
            node_model = AlignmentModel.load(folder, MANIFEST, NodeSettings())
            load_s = time.monotonic() - began
            latencies = asyncio.run(node_latencies(node_model, latency_pairs))
            aligner = ThotAligner.load(folder)
            t0 = time.perf_counter()
            aligned[name] = aligner.align_many(quality_pairs)
            batch_ms = (time.perf_counter() - t0) * 1000 / len(quality_pairs)
            aligner.close()
            figures[name] = {
                "train_s": trained.seconds,
                "load_s": load_s,
                "size_mb": sum(p.stat().st_size for p in folder.iterdir()) / 1e6,
                "align_median_ms": statistics.median(latencies),
                "align_p95_ms": percentile(latencies, 0.95),
                "align_batch_ms_per_pair": batch_ms,
                "direction_agreement": trained.agreement,
                **quality(aligned[name]),
            }
            print(json.dumps({name: figures[name]}), file=sys.stderr, flush=True)
    cross = {f"{a}~{b}": f1(aligned[a], aligned[b]) for a, b in itertools.combinations(aligned, 2)}

    names = list(figures)
    rows = list(next(iter(figures.values())))
    print(
        f"{len(pairs)} training pairs (en→sw), {len(latency_pairs)} latency pairs, {len(quality_pairs)} quality pairs"
    )
    print(f"{'':28}" + "".join(f"{n:>14}" for n in names))
    for row in rows:
        print(f"{row:28}" + "".join(f"{figures[n][row]:>14.3f}" for n in names))
    for pair, value in cross.items():
        print(f"cross-model link F1 {pair}: {value:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"pairs": len(pairs), "models": figures, "cross_f1": cross}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
