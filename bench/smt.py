"""The `smt-transfer` family measured on the bundled English→Swahili New Testament.

    .venv/bin/python -m bench.smt train --out DIR [--evaluations N]   # build time, held-out chrF
    .venv/bin/python -m bench.smt measure --model DIR [--cpu 0]      # latencies on one core
    .venv/bin/python -m bench.smt sweep --model DIR [--verses 60]    # Thot search limits vs graph time

The corpus is every verse pair present in both texts; 200 pairs (seeded split, seed 0) are held
out, the rest train the model exactly as a build does (`build_jobs.smt.train.train_smt`).

`train` prints build time and held-out chrF with and without the sentence-start capitalisation of
the first word (the truecaser alone leaves it lowercase). `measure` pins itself to one CPU and,
on the held-out verses, times translate, the word graph as sil-machine's `ThotSmtModel` returns it
with the folder's search limits (the baseline: unpruned) beside the node's word graph
(`inference_gpu.families.smt.engine`: its search limits, then pruned), and train-segment. `sweep` shows
how Thot's search limits move word-graph time and translation chrF. Figures go to stdout and
`bench/results/smt-*.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from build_jobs.data import Corpus, split_corpus
from serval_common.smt_build_options import SmtBuildOptions
from serval_common.thot_smt import SmtFolder, final_text, load_engine
from tests.helpers import verse_pairs

HELD_OUT = 200
RESULTS = Path(__file__).parent / "results"


def corpus() -> Corpus:
    sources, targets = verse_pairs("engwebp", "swh1850", 100_000)
    return split_corpus(sources, targets, eval_share=HELD_OUT / len(sources), seed=0)


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


def write(name: str, figures: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"smt-{name}.json").write_text(json.dumps(figures, indent=2))


def train(out: Path, evaluations: int) -> None:
    from build_jobs.smt.train import train_smt

    data = corpus()
    shutil.rmtree(out, ignore_errors=True)
    options = SmtBuildOptions(tuningEvaluations=evaluations, evalShare=0.0, maxEvalPairs=HELD_OUT)
    started = time.monotonic()
    trained = train_smt(data, options, out, phase=lambda _f, _m: None, should_cancel=lambda: False)
    figures = {
        "train_pairs": trained.train_pairs,
        "held_out": trained.eval_pairs,
        "tuning_evaluations": trained.tuning_evaluations,
        "train_s": round(trained.seconds, 1),
        "train_and_score_s": round(time.monotonic() - started, 1),
        "chrf": round(trained.chrf, 2),
        "chrf_without_first_word_capitalisation": round(trained.chrf_truecaser_only, 2),
        "folder_bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file()),
    }
    print(json.dumps(figures, indent=2))
    write(f"train-{evaluations}", figures)


def measure(model: Path, cpu: int | None, verses: int) -> None:
    from inference_gpu.families.smt.engine import SmtEngine

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    held = corpus().evaluation[:verses]
    engine = SmtEngine(model, 10_000)
    baseline = load_engine(model)
    wall: dict[str, list[float]] = {"translate": [], "baseline": [], "node": [], "train": []}
    cpu_s: dict[str, list[float]] = {what: [] for what in wall}
    sizes: dict[str, list[float]] = {
        "baseline arcs": [],
        "node arcs": [],
        "baseline words": [],
        "node words": [],
    }

    def timed(what: str, call: Any) -> Any:
        """Wall seconds and this thread's CPU seconds (Thot decodes in the calling thread, so CPU
        seconds do not count time lost to other processes on a shared machine)."""
        started, cpu_started = time.perf_counter(), time.thread_time()
        value = call()
        cpu_s[what].append(time.thread_time() - cpu_started)
        wall[what].append(time.perf_counter() - started)
        return value

    for source, _ in held:
        timed("translate", lambda s=source: engine.translate(s, 1, ""))
        raw = timed("baseline", lambda s=source: baseline.get_word_graph(s))
        sizes["baseline arcs"].append(len(raw.arcs))
        sizes["baseline words"].append(sum(len(a.target_tokens) for a in raw.arcs) + len(raw.final_states))
        pruned = timed("node", lambda s=source: engine.graph(s))
        sizes["node arcs"].append(len(pruned.arcs))
        sizes["node words"].append(sum(len(a.target_tokens) for a in pruned.arcs) + len(pruned.final_states))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "model"
        shutil.copytree(model, copy)
        learner = SmtEngine(copy, 10_000)
        for source, target in held[:20]:
            timed("train", lambda s=source, t=target: learner.train_segment(s, t, True))
        learner.close()
    names = {
        "translate": "translate",
        "baseline": "word graph, baseline",
        "node": "word graph, node",
        "train": "train-segment",
    }
    figures: dict[str, Any] = {
        "verses": len(held),
        "cpu": cpu,
        "wall_s": {names[k]: quantiles(v) for k, v in wall.items()},
        "cpu_s": {names[k]: quantiles(v) for k, v in cpu_s.items()},
        "sizes": {k: quantiles(v) for k, v in sizes.items()},
        "graphs_over_1000_hypotheses": {
            "baseline": sum(w > 1000 for w in sizes["baseline words"]),
            "node": sum(w > 1000 for w in sizes["node words"]),
        },
    }
    print("baseline: sil-machine's ThotSmtModel.get_word_graph (the folder's search limits, unpruned)")
    print(f"{'':36}{'median':>10}{'p95':>10}{'max':>10}")
    rows = [(f"{name} (s)", q) for name, q in figures["wall_s"].items()]
    rows += [(f"CPU: {name} (s)", q) for name, q in figures["cpu_s"].items()]
    rows += list(figures["sizes"].items())
    for name, q in rows:
        print(f"{name:36}{q['median']:>10.3f}{q['p95']:>10.3f}{q['max']:>10.3f}")
    over = figures["graphs_over_1000_hypotheses"]
    print(
        f"graphs over sil-machine's 1,000-hypothesis queue: baseline {over['baseline']}, "
        f"node {over['node']} of {len(held)}"
    )
    write("measure", figures)
    engine.close()
    baseline.close()


def sweep(model: Path, cpu: int | None, verses: int, settings: list[str]) -> None:
    import sacrebleu

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    held = corpus().evaluation
    folder = SmtFolder.read(model)
    results = []
    for spec in settings:
        w, s, a = (int(x) for x in spec.split(","))
        search = folder.decoder.model_copy(
            update={"translation_options": w, "stack_size": s, "max_phrase_length": a}
        )
        engine = load_engine(model, search=search)
        times = []
        for source, _ in held[:verses]:
            started = time.perf_counter()
            engine.get_word_graph(source)
            times.append(time.perf_counter() - started)
        translations = [
            final_text(r, engine.target_detokenizer) for r in engine.translate_batch([s for s, _ in held])
        ]
        chrf = sacrebleu.corpus_chrf(translations, [[t for _, t in held]]).score
        engine.close()
        q = quantiles(times)
        results.append({"W": w, "S": s, "A": a, "word_graph_s": q, "chrf": round(chrf, 2)})
        print(
            f"W={w:<3} S={s:<3} A={a:<3} graph median {q['median']:.3f} p95 {q['p95']:.3f} max {q['max']:.3f}  chrF {chrf:.2f}",
            flush=True,
        )
    write("sweep", {"verses": verses, "cpu": cpu, "results": results})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train_cmd = commands.add_parser("train")
    train_cmd.add_argument("--out", type=Path, required=True)
    train_cmd.add_argument("--evaluations", type=int, default=0)
    measure_cmd = commands.add_parser("measure")
    measure_cmd.add_argument("--model", type=Path, required=True)
    measure_cmd.add_argument("--cpu", type=int, default=0)
    measure_cmd.add_argument("--verses", type=int, default=HELD_OUT)
    sweep_cmd = commands.add_parser("sweep")
    sweep_cmd.add_argument("--model", type=Path, required=True)
    sweep_cmd.add_argument("--cpu", type=int, default=0)
    sweep_cmd.add_argument("--verses", type=int, default=60)
    sweep_cmd.add_argument("--settings", nargs="+", default=["10,10,7", "10,5,7", "5,5,7", "5,3,5", "3,3,5"])
    args = parser.parse_args()
    if args.command == "train":
        train(args.out, args.evaluations)
    elif args.command == "measure":
        measure(args.model, args.cpu, args.verses)
    else:
        sweep(args.model, args.cpu, args.verses, args.settings)


if __name__ == "__main__":
    main()
