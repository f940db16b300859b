"""Alignment agreement: the statistical word aligner's links against NLLB's attention alignments
on the same held-out verse pairs, over REST, with build times and align latency.

Per pair (source S, reference translation R; the held-out verses of `bench/interactive.py`):
- the aligner: `POST /api/v1/word-alignment/engines/{id}/align` `{sourceSegment: S, targetSegment: R}`
  → `{sourceTokens, targetTokens, alignment: [{sourceIndex, targetIndex, score}]}`;
- NLLB: `POST /api/v1/translation/engines/{id}/translate-prefix` `{segment: S, prefix: R}`: the
  model is forced through R, and its best result's `alignment` (from the decoder's attention) links
  S's words to R's words; target words past R (the model may go on after it) are dropped.
The two tokenizations differ, so both are located in S and R by character offsets (tokens are
substrings in order; case is ignored, as an aligner may lowercase), and every NLLB link (i, j)
becomes the links (i′, j′) between the aligner's tokens whose spans overlap i and j: both link sets
then live on the aligner's tokens. With NLLB's as the reference, precision = |A ∩ N| / |A|,
recall = |A ∩ N| / |N| and F1, summed over all pairs (micro), for every aligner link and for those
scoring at least `--threshold`; and, as a floor, for a diagonal alignment (each source word linked
to the target word at the same relative position). A tiny NLLB's attention is a weak reference:
this is agreement, not accuracy.

Against a running service (after the word-alignment engines are merged):
    python -m bench.alignment_agreement --url URL --api-key KEY --nmt-engine ID --alignment-engine ID
Or start one here, build an inference-only `nmt` engine and a `statistical` engine trained on the
7,644 training pairs, and compare:
    python -m bench.alignment_agreement --setup [--alignment-options '{…}'] [--verses 155]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.interactive import (
    DEMO_BASE_BOOKS,
    HELD_OUT,
    Pair,
    build_engine,
    ebible_pairs,
    local_service,
    split,
    spread,
    summary,
    upload_texts,
    warm_up,
)
from serval_cli.interactive import ServalInteractiveEngine
from tests.corpus import EBIBLE

Span = tuple[int, int]
Link = tuple[int, int]


def locate(text: str, tokens: Sequence[str]) -> list[Span | None]:
    """Each token's character span in `text`, searched in order from the end of the previous one
    (case ignored); None for a token not found."""
    lowered = text.lower()
    spans: list[Span | None] = []
    cursor = 0
    for token in tokens:
        at = lowered.find(token.lower(), cursor) if token else -1
        if at < 0:
            spans.append(None)
            continue
        spans.append((at, at + len(token)))
        cursor = at + len(token)
    return spans


def overlapping(span: Span | None, spans: Sequence[Span | None]) -> list[int]:
    if span is None:
        return []
    return [
        k for k, other in enumerate(spans) if other is not None and other[0] < span[1] and span[0] < other[1]
    ]


def project(
    links: Iterable[Link],
    from_spans: tuple[list[Span | None], list[Span | None]],
    onto: tuple[list[Span | None], list[Span | None]],
) -> set[Link]:
    """Links between one tokenization's words as links between the other's overlapping words."""
    projected: set[Link] = set()
    for i, j in links:
        if not (0 <= i < len(from_spans[0]) and 0 <= j < len(from_spans[1])):
            continue
        for i2 in overlapping(from_spans[0][i], onto[0]):
            for j2 in overlapping(from_spans[1][j], onto[1]):
                projected.add((i2, j2))
    return projected


def diagonal(sources: int, targets: int) -> set[Link]:
    if not (sources and targets):
        return set()
    return {(i, min(targets - 1, (2 * i + 1) * targets // (2 * sources))) for i in range(sources)}


@dataclass
class Agreement:
    aligner_links: int = 0
    nllb_links: int = 0
    both: int = 0

    def add(self, aligner: set[Link], nllb: set[Link]) -> None:
        self.aligner_links += len(aligner)
        self.nllb_links += len(nllb)
        self.both += len(aligner & nllb)

    def figures(self) -> dict[str, float | int]:
        precision = self.both / self.aligner_links if self.aligner_links else 0.0
        recall = self.both / self.nllb_links if self.nllb_links else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {
            "aligner_links": self.aligner_links,
            "nllb_links": self.nllb_links,
            "both": self.both,
            "precision": precision,
            "recall": recall,
            "f1": f1,
        }


@dataclass
class Comparison:
    threshold: float
    every_link: Agreement = field(default_factory=Agreement)
    confident: Agreement = field(default_factory=Agreement)
    diagonal: Agreement = field(default_factory=Agreement)
    """A baseline: each source word linked to the target word at the same relative position."""
    unlocated_tokens: int = 0
    align_seconds: list[float] = field(default_factory=list)
    prefix_seconds: list[float] = field(default_factory=list)
    """NLLB's forced `translate-prefix` calls."""
    pairs: int = 0


def nllb_links(
    result: dict[str, Any], source: str, reference: str
) -> tuple[list[Span | None], list[Span | None], set[Link]]:
    """NLLB's source and target word spans and its links, the target words limited to `reference`."""
    source_spans = locate(source, result["sourceTokens"])
    target_spans = locate(result["translation"], result["targetTokens"])
    inside = [span if span is not None and span[0] < len(reference) else None for span in target_spans]
    links = {(a["sourceIndex"], a["targetIndex"]) for a in result.get("alignment", [])}
    return source_spans, inside, {(i, j) for i, j in links if 0 <= j < len(inside) and inside[j] is not None}


def pair_json(verse: Pair) -> dict[str, str]:
    return {"sourceSegment": verse.source, "targetSegment": verse.target}


def compare(
    aligner: httpx.Client, nmt: ServalInteractiveEngine, verses: list[Pair], threshold: float
) -> Comparison:
    comparison = Comparison(threshold)
    for number, verse in enumerate(verses, 1):
        started = time.perf_counter()
        response = aligner.post("align", json=pair_json(verse))
        comparison.align_seconds.append(time.perf_counter() - started)
        response.raise_for_status()
        aligned = response.json()
        a_spans = (
            locate(verse.source, aligned["sourceTokens"]),
            locate(verse.target, aligned["targetTokens"]),
        )
        comparison.unlocated_tokens += sum(span is None for side in a_spans for span in side)
        scored = {(a["sourceIndex"], a["targetIndex"]): a.get("score") for a in aligned["alignment"]}

        (result,) = nmt.translate_prefix_json(verse.source, verse.target)
        n_source, n_target, n_links = nllb_links(result, verse.source, verse.target)
        reference = project(n_links, (n_source, n_target), a_spans)

        comparison.every_link.add(set(scored), reference)
        comparison.diagonal.add(diagonal(len(a_spans[0]), len(a_spans[1])), reference)
        confident = {link for link, score in scored.items() if score is None or score >= threshold}
        comparison.confident.add(confident, reference)
        comparison.pairs += 1
        if number % 20 == 0 or number == len(verses):
            f1 = comparison.every_link.figures()["f1"]
            print(f"  {number}/{len(verses)} pairs, F1 so far {100 * f1:.1f}%", flush=True)
    return comparison


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url")
    parser.add_argument("--api-key")
    parser.add_argument("--nmt-engine", help="a built nmt translation engine")
    parser.add_argument("--alignment-engine", help="a built statistical word-alignment engine")
    parser.add_argument("--setup", action="store_true", help="start a service here and build both engines")
    parser.add_argument(
        "--alignment-options", type=json.loads, default=None, help="the statistical build's options"
    )
    parser.add_argument("--train-pairs", type=int, help="train the aligner on this many pairs (default: all)")
    parser.add_argument("--verses", type=int, default=HELD_OUT)
    parser.add_argument("--exclude-books", nargs="*", default=list(DEMO_BASE_BOOKS))
    parser.add_argument(
        "--threshold", type=float, default=0.5, help="the aligner's confident links score this"
    )
    parser.add_argument("--home", type=Path, default=Path(".serval"))
    parser.add_argument("--data", type=Path, default=EBIBLE, help="the ebible-nt folder")
    parser.add_argument("--out", type=Path, default=Path("bench/results/alignment_agreement.json"))
    args = parser.parse_args()

    training, held_out = split(ebible_pairs(args.data))
    training = training[: args.train_pairs] if args.train_pairs else training
    excluded = set(args.exclude_books)
    verses = spread([v for v in held_out if v.ref.split()[0] not in excluded], args.verses)
    builds: dict[str, Any] = {}
    if args.setup:
        with local_service(args.home) as service:
            corpora = upload_texts(service.rest, training)
            nmt_id, nmt_s = build_engine(service.rest, "translation", "nmt", None, None)
            aligner_id, aligner_s = build_engine(
                service.rest, "word-alignment", "statistical", corpora, args.alignment_options
            )
            builds = {
                "nmt": {"seconds": nmt_s, "train_pairs": 0},
                "statistical": {
                    "seconds": aligner_s,
                    "train_pairs": len(training),
                    "options": args.alignment_options,
                },
            }
            comparison = run(service.url, service.api_key, nmt_id, aligner_id, verses, args.threshold)
    else:
        if not (args.url and args.api_key and args.nmt_engine and args.alignment_engine):
            parser.error("give --url, --api-key, --nmt-engine and --alignment-engine, or --setup")
        comparison = run(
            args.url, args.api_key, args.nmt_engine, args.alignment_engine, verses, args.threshold
        )

    every, confident = comparison.every_link.figures(), comparison.confident.figures()
    baseline = comparison.diagonal.figures()
    prefix_latency = summary(comparison.prefix_seconds)
    align_latency = summary(comparison.align_seconds)
    print(f"\n{comparison.pairs} held-out pairs; NLLB's attention links as the reference")
    print(f"{'':28}{'every link':>14}{f'score ≥ {args.threshold:g}':>14}{'diagonal':>14}")
    for key in ("precision", "recall", "f1"):
        print(
            f"{key:28}{100 * every[key]:>13.1f}%{100 * confident[key]:>13.1f}%{100 * baseline[key]:>13.1f}%"
        )
    for key in ("aligner_links", "nllb_links", "both"):
        print(f"{key.replace('_', ' '):28}{every[key]:>14}{confident[key]:>14}{baseline[key]:>14}")
    if align_latency:
        print(f"align median / p95 (ms)     {align_latency['median_ms']:.0f} / {align_latency['p95_ms']:.0f}")
    if prefix_latency:
        print(
            f"NLLB forced prefix median / p95 (ms)  {prefix_latency['median_ms']:.0f} / {prefix_latency['p95_ms']:.0f}"
        )
    for name, build in builds.items():
        print(f"{name} build: {build['seconds']:.0f} s on {build['train_pairs']} pairs")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "verses": [v.ref for v in verses],
                "threshold": args.threshold,
                "every_link": every,
                "confident_links": confident,
                "diagonal_baseline": baseline,
                "unlocated_aligner_tokens": comparison.unlocated_tokens,
                "latency": {"align": align_latency, "nllb_translate_prefix": prefix_latency},
                "builds": builds,
            },
            indent=2,
        )
    )
    print(f"written to {args.out}")


def run(
    url: str, api_key: str, nmt_id: str, aligner_id: str, verses: list[Pair], threshold: float
) -> Comparison:
    with (
        ServalInteractiveEngine(url, api_key, nmt_id) as nmt,
        httpx.Client(
            base_url=f"{url.rstrip('/')}/api/v1/word-alignment/engines/{aligner_id}/",
            headers={"X-API-Key": api_key},
            timeout=120,
        ) as aligner,
    ):
        warm_up(nmt, verses[0].source)
        deadline = time.monotonic() + 600
        while aligner.post("align", json=pair_json(verses[0])).status_code in (409, 503):
            if time.monotonic() > deadline:
                raise RuntimeError("the word-alignment engine never answered align")
            time.sleep(2)
        comparison = compare(aligner, nmt, verses, threshold)
        comparison.prefix_seconds = list(nmt.latencies.get("translate_prefix", []))
    return comparison


if __name__ == "__main__":
    main()
