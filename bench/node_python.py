"""`python -m bench.node_python`: the node's own Python per verse, piece by piece, beside the engine's
time for the same verses in the same run.

A translation on the node is: the tokenizer's `encode` (Moses normalisation, SentencePiece, which
word each piece belongs to), the micro-batcher's hand-off to its thread and back, the backend's
`translate` (CTranslate2 and its scoring pass: the engine), then `decode` and `build_result`
(confidences and the word alignment). Every piece but the engine is Python that a GPU does not
speed up, so on a GPU node it caps throughput. Each piece runs over the same verses, one at a time,
in this process (on one core with `--pin`); a figure is the median of `--repeats` passes of the
mean per verse. Compare two checkouts by running this in each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench import pinning
from bench.workload import SOURCE_CODE, TARGET_CODE, verses
from inference_gpu.batcher import MicroBatcher
from inference_gpu.families.nmt.backends.base import Hypothesis, TranslateRequest
from inference_gpu.families.nmt.backends.ctranslate2 import CTranslate2Backend
from inference_gpu.families.nmt.results import build_result, word_alignment
from serval_cli.demo import BASE_MODEL, ensure_base_model
from serval_common.manifest import fetch_folder
from serval_common.nllb_tokenizer import EncodedSource, NllbTokenizer
from serval_common.settings import NodeSettings, Settings
from serval_common.store import store_from_settings

console = Console(stderr=True)


def _per_call_us(call: Callable[[int], object], count: int, repeats: int) -> float:
    """The median over `repeats` passes of the mean wall microseconds of `call(i)` for i < count."""
    passes = []
    for _ in range(repeats):
        started = time.perf_counter()
        for i in range(count):
            call(i)
        passes.append(1e6 * (time.perf_counter() - started) / count)
    return statistics.median(passes)


def _batcher_round_trip_us(request: TranslateRequest, count: int, repeats: int) -> float:
    """CPU microseconds of this process per lone request through a `MicroBatcher` whose backend
    does nothing: the hand-off to the batch thread and the answer back to the event loop."""

    async def run() -> float:
        batcher: MicroBatcher[TranslateRequest, TranslateRequest] = MicroBatcher(
            lambda batch: batch, max_wait_ms=0
        )
        for _ in range(100):
            await batcher.submit(request)
        passes = []
        for _ in range(repeats):
            started = time.process_time()
            for _ in range(count):
                await batcher.submit(request)
            passes.append(1e6 * (time.process_time() - started) / count)
        await batcher.close()
        return statistics.median(passes)

    return asyncio.run(run())


def measure(
    folder: Path, max_positions: int | None, sentences: list[str], node: NodeSettings, repeats: int
) -> dict[str, float]:
    tokenizer = NllbTokenizer.from_folder(folder)
    backend = CTranslate2Backend.load(folder, node, max_positions)
    count = len(sentences)
    sources: list[EncodedSource] = [tokenizer.encode(s, SOURCE_CODE) for s in sentences]
    requests = [
        TranslateRequest(source.tokens, [TARGET_CODE], num_hypotheses=1, beam_size=node.beam_size)
        for source in sources
    ]
    hypotheses: list[Hypothesis] = [backend.translate([request])[0][0] for request in requests]
    targets = [tokenizer.decode(h.tokens) for h in hypotheses]
    figures = {
        "engine: the backend's translate": _per_call_us(
            lambda i: backend.translate([requests[i]]), count, max(1, repeats // 2)
        ),
        "encode": _per_call_us(lambda i: tokenizer.encode(sentences[i], SOURCE_CODE), count, repeats),
        "decode": _per_call_us(lambda i: tokenizer.decode(hypotheses[i].tokens), count, repeats),
        "build_result": _per_call_us(
            lambda i: build_result(sources[i], targets[i], hypotheses[i]), count, repeats
        ),
        "  of which word_alignment": _per_call_us(
            lambda i: word_alignment(sources[i], targets[i], hypotheses[i].attention), count, repeats
        ),
        "batcher round trip (CPU)": _batcher_round_trip_us(requests[0], 2000, repeats),
    }
    backend.unload()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=Path(".serval"), help="where the base models are kept")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pin", action="store_true", help="this process on one core")
    parser.add_argument("--out", type=Path, default=Path("bench/results/node_python.json"))
    args = parser.parse_args()
    settings = Settings(home=args.home)
    ensure_base_model(settings, steps=1000, rebuild=False)
    sentences = verses(args.sentences)
    cores = {pinning.NODE_CORE} if args.pin and pinning.available() else None
    with tempfile.TemporaryDirectory() as tmp, pinning.this_process_on(cores):
        manifest, folder = fetch_folder(store_from_settings(settings), f"base-models/{BASE_MODEL}", Path(tmp))
        figures = measure(folder, manifest.max_positions, sentences, NodeSettings(), args.repeats)

    engine = figures["engine: the backend's translate"]
    table = Table(title=f"the node's Python per verse ({len(sentences)} verses, tiny model)")
    for column in ("piece", "µs per verse", "against the engine"):
        table.add_column(column, justify="left" if column == "piece" else "right")
    for name, value in figures.items():
        table.add_row(name, f"{value:.0f}", f"{value / engine:.1%}")
    python = sum(v for k, v in figures.items() if not k.startswith(("engine", "  ")))
    table.add_row("the node's Python in all", f"{python:.0f}", f"{python / engine:.1%}")
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sentences": len(sentences), "us_per_verse": figures}, indent=2) + "\n")
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
