"""Learning confirmed verses: how much an engine gains, verse after verse, from the verses a
translator confirms as they go ("confirm as you go"), and what that costs each translate.

Builds on the New Testament less one book, then a simulated translator walks that book, which no
model saw (default: the first 120 verses of John, in order), English→Swahili by default
(engwebp → swh1850 of `../shared/data/ebible-nt`; `--target spaRV1909` for Spanish).

Variants, on the same verses, in the same run, side by side:
1. `nmt-plain`: an nmt engine fine-tuned on the training split with `fuzzyMatches: false`;
   nothing is confirmed (no learning).
2. `nmt-exact`: the same engine (walked after 1, so 1 saw no pair), every verse confirmed with
   train-segment: today's exact-match overlay, which answers only exact repeats of a source.
3a. `nmt-fuzzy-0`: an nmt engine fine-tuned with `fuzzyMatches: true` (and `microBuilds: false`
   where the service has micro-builds), nothing confirmed: the augmented model and its memory of
   the training split alone.
3. `nmt-fuzzy`: the same engine (walked after 3a), every verse confirmed: each pair joins the
   engine's translation memory at once, and the next similar source reads it.
4. `nmt-micro`: fine-tuned with `fuzzyMatches: true` and micro-builds on, every verse confirmed:
   the memory plus the short automatic fine-tunes after N confirmed pairs (new builds of the
   engine, new model revisions). Skipped with `--no-micro-builds`, and when this service has no
   micro-builds yet.
5. `smt-transfer`: trained on the training split, every verse confirmed (Thot learns the pair).

The protocol, per verse (source S, reference translation R), for every variant in turn before the
next verse (the walks that confirm nothing run first, interleaved verse by verse; then those that
confirm, likewise, so the latencies being compared were measured side by side):
1. One `translate` of S, timed at this one client: the translate latency (median, p95).
2. One `get-word-graph` of S; its best path is the first suggestion (chrF against R). The verse is
   typed through sil-machine's interactive translator on that graph as `bench/interactive.py`
   does: whole words, and with completion (word prediction accuracy, keystroke saving).
3. The "one word changed" probe: S with its longest word replaced by the longest (different) word
   of the verse before it, translated just before and just after the verse is confirmed (chrF
   of each against R; the gain is after − before). A variant that confirms nothing translates it
   twice all the same (a noise floor, zero for a deterministic engine).
4. A variant that confirms sends `train-segment` with S and R (`sentenceStart: true`).

A verse is *near* when its best fuzzy match (`serval_common.fuzzy_memory.TranslationMemory`:
word-level edit similarity) among the training split and the verses walked before it scores at
least 0.5, the threshold at which the memory answers; the rest are *far*.

Reported (printed, and with every verse's figures in `bench/results/learning.json`): per variant,
chrF of first suggestions, word prediction, keystroke saving (whole words and with completion),
the probe's chrF before/after and its gain, over the whole walk, per chapter (mean and standard
deviation over chapters) and for near and far verses; the median and p95 translate latency and
the fuzzy variants' median as a ratio to `nmt-exact`'s ("added cost per translate", goal ≤ 1.10);
the gain of each variant over `nmt-plain` (whole walk, and the mean and standard deviation of its
per-chapter gains); how far `nmt-fuzzy` and `nmt-micro` are from `smt-transfer` on word
prediction; the micro-builds each engine ran during the walk.

    python -m bench.learning [--book JHN] [--verses 120] [--target swh1850|spaRV1909]
                             [--train-pairs N] [--nmt-options '{"maxSteps": 300}'] [--smt-options '{…}']
                             [--no-micro-builds] [--micro-build-pairs N] [--home .serval]
                             [--out bench/results/learning.json]

It starts its own API service and inference node on loopback ports (`bench.interactive`'s
`local_service`: the tiny NLLB base model of `serval demo` from `--home`'s store, built first if
missing), uploads the training split, builds the engines one after another and walks. A quick
trial: `python -m bench.learning --home /work/bench-home --verses 12 --train-pairs 400
--nmt-options '{"maxSteps": 30}'`. Run by hand, never from the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.interactive import (
    Pair,
    Typing,
    build_engine,
    chrf,
    ebible_pairs,
    graph_suggester,
    local_service,
    spread,
    summary,
    type_verse,
    upload_texts,
    warm_up,
)
from serval_cli import processes
from serval_cli.interactive import ServalInteractiveEngine
from serval_common.build_options import NmtBuildOptions
from serval_common.fuzzy_memory import TranslationMemory
from tests.corpus import EBIBLE

SOURCE_TEXT = "engwebp"
TARGET_LANGUAGES = {"swh1850": "sw", "spaRV1909": "es", "hauulb": "ha"}
"""The eBible texts a target can be, and the engine's language for each (K'iche' is no NLLB
language)."""
NEAR_SCORE = 0.5
ADDED_COST_GOAL = 1.10
RETRY_S = 180.0
"""How long a call answered 409 or 503 (a model loading or swapping) is retried."""
MICRO_BUILD_PAIRS_ENV = "SERVAL_LEARNING__MICRO_BUILD_PAIRS"
T = TypeVar("T")


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    engine: str
    """The key of the built engine it walks (`engine_specs`)."""
    confirms: bool


VARIANTS = (
    Variant("nmt-plain", "1. nmt, no learning", "nmt-plain", confirms=False),
    Variant("nmt-exact", "2. nmt, exact overlay", "nmt-plain", confirms=True),
    Variant("nmt-fuzzy-0", "3a. nmt fuzzy, nothing confirmed", "nmt-fuzzy", confirms=False),
    Variant("nmt-fuzzy", "3. nmt fuzzy augmentation", "nmt-fuzzy", confirms=True),
    Variant("nmt-micro", "4. nmt fuzzy + micro-builds", "nmt-micro", confirms=True),
    Variant("smt-transfer", "5. smt-transfer", "smt-transfer", confirms=True),
)
NO_LEARNING = "nmt-plain"
EXACT = "nmt-exact"
SMT = "smt-transfer"
METRICS = (
    "chrf_first_suggestion",
    "word_prediction",
    "keystroke_saving",
    "keystroke_saving_completion",
    "probe_chrf_before",
    "probe_chrf_after",
    "probe_gain",
)
COST_BASELINES = {"nmt-fuzzy": EXACT, "nmt-micro": EXACT, "nmt-fuzzy-0": NO_LEARNING}
"""Whose translate latency each fuzzy variant's is compared with: the same phase of the walk."""
GAIN_METRICS = (
    "chrf_first_suggestion",
    "word_prediction",
    "keystroke_saving",
    "keystroke_saving_completion",
    "probe_chrf_after",
)


def fuzzy_matches_in_service() -> bool:
    return any(f.alias == "fuzzyMatches" for f in NmtBuildOptions.model_fields.values())


def micro_builds_in_service() -> bool:
    """Whether this checkout's API service starts micro-builds (and reads `microBuilds`)."""
    return importlib.util.find_spec("serval_api.service.micro_builds") is not None


def engine_specs(
    nmt_options: dict[str, Any], smt_options: dict[str, Any] | None, micro_builds: bool
) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """Engine key → (engine type, build options)."""
    return {
        "nmt-plain": ("nmt", {**nmt_options, "fuzzyMatches": False}),
        "nmt-fuzzy": (
            "nmt",
            {**nmt_options, "fuzzyMatches": True, **({"microBuilds": False} if micro_builds else {})},
        ),
        "nmt-micro": ("nmt", {**nmt_options, "fuzzyMatches": True, "microBuilds": True}),
        "smt-transfer": ("smt-transfer", smt_options),
    }


# The verses walked.

_LETTERS = re.compile(r"[^\W\d_]+")
FALLBACK_WORD = "something"


def one_word_changed(source: str, previous: str) -> tuple[str, str, str]:
    """(`source` with its longest word, the first of the longest, replaced by the first of the
    longest words of `previous` that is another word; the word; its replacement)."""
    words = list(_LETTERS.finditer(source))
    if not words:
        return source, "", ""
    longest = max(words, key=lambda m: len(m.group()))
    others = [w for w in _LETTERS.findall(previous) if w.lower() != longest.group().lower()]
    replacement = max(others, key=len) if others else FALLBACK_WORD
    changed = source[: longest.start()] + replacement + source[longest.end() :]
    return changed, longest.group(), replacement


@dataclass(frozen=True)
class Verse:
    pair: Pair
    chapter: str
    probe: str
    changed: tuple[str, str]
    near_score: float
    """The best fuzzy match's score among the training split and the verses walked before."""

    @property
    def near(self) -> bool:
        return self.near_score >= NEAR_SCORE


def book_of(pair: Pair) -> str:
    return pair.ref.split()[0]


def walked_verses(pairs: list[Pair], book: str, count: int, training: list[Pair]) -> list[Verse]:
    """The first `count` verses of `book` in order, each with its probe and its nearness."""
    memory = TranslationMemory(((p.source, p.target) for p in training), min_score=0.0)
    out = []
    for index in [i for i, p in enumerate(pairs) if book_of(p) == book][:count]:
        pair = pairs[index]
        previous = pairs[index - 1].source if index else ""
        probe, word, replacement = one_word_changed(pair.source, previous)
        match = memory.best(pair.source)
        out.append(
            Verse(
                pair,
                pair.ref.split(":")[0],
                probe,
                (word, replacement),
                match.score if match is not None else 0.0,
            )
        )
        memory.add(pair.source, pair.target)
    return out


# Walking.


@dataclass
class Walk:
    variant: Variant
    engine: ServalInteractiveEngine
    records: list[dict[str, Any]] = field(default_factory=list)
    suggest_seconds: list[float] = field(default_factory=list)
    translate_seconds: list[float] = field(default_factory=list)
    translate_tokens: list[int] = field(default_factory=list)
    seconds: float = 0.0
    """Time spent walking (this client's suggestions included)."""
    retries: int = 0
    error: str | None = None


def answered(walk: Walk, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, again while the service answers 409 or 503 (a model loading or swapping)."""
    deadline = time.monotonic() + RETRY_S
    while True:
        try:
            return call(*args)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code not in (409, 503) or time.monotonic() > deadline:
                raise
            walk.retries += 1
            time.sleep(1)


def step(walk: Walk, verse: Verse) -> None:
    """The module's protocol for one verse on one variant."""
    if walk.error is not None:
        return
    engine = walk.engine
    source, reference = verse.pair.source, verse.pair.target
    started = time.perf_counter()
    try:
        translation = answered(walk, engine.translate, source)
        walk.translate_seconds.append(engine.latencies["translate"][-1])
        walk.translate_tokens.append(len(translation.target_tokens))
        graph = answered(walk, engine.get_word_graph, source)
        best = next(engine.create_translator(source, word_graph=graph).get_current_results(), None)
        typed = [
            type_verse(
                reference,
                graph_suggester(engine.create_translator(source, word_graph=graph), walk.suggest_seconds),
                completion,
            )
            for completion in (False, True)
        ]
        before = answered(walk, engine.translate, verse.probe).translation
        confirmed_at = None
        if walk.variant.confirms:
            answered(walk, engine.train_segment, source, reference, True)
            confirmed_at = datetime.now(UTC).isoformat()
        after = answered(walk, engine.translate, verse.probe).translation
    except httpx.HTTPError as exc:
        detail = (
            f"{exc.response.status_code}: {exc.response.text}"
            if isinstance(exc, httpx.HTTPStatusError)
            else exc
        )
        walk.error = f"{verse.pair.ref}: {type(exc).__name__} {detail}"
        print(f"  {walk.variant.key} stopped: {walk.error}", flush=True)
        return
    finally:
        walk.seconds += time.perf_counter() - started
    walk.records.append(
        {
            "ref": verse.pair.ref,
            "chapter": verse.chapter,
            "near_score": round(verse.near_score, 4),
            "translate_ms": round(1000 * walk.translate_seconds[-1], 2),
            "translate_tokens": walk.translate_tokens[-1],
            "first_suggestion": best.translation if best is not None else "",
            "whole_words": asdict(typed[0]),
            "with_completion": asdict(typed[1]),
            "probe": verse.probe,
            "probe_before": before,
            "probe_after": after,
            "confirmed_at": confirmed_at,
        }
    )


def walk_phase(name: str, walks: list[Walk], verses: list[Verse], warm_segment: str) -> float:
    """Every walk's verse before the next verse; seconds taken."""
    if not walks:
        return 0.0
    started = time.monotonic()
    for walk in walks:
        warm_up(walk.engine, warm_segment)
    for number, verse in enumerate(verses, 1):
        for walk in walks:
            step(walk, verse)
        if number % 10 == 0 or number == len(verses):
            done = ", ".join(
                f"{w.variant.key} {typing_of(w.records, 'whole_words').word_prediction:.0%}" for w in walks
            )
            print(f"  {name}: {number}/{len(verses)} verses; words predicted: {done}", flush=True)
    return time.monotonic() - started


# Figures.


def typing_of(records: Sequence[dict[str, Any]], key: str) -> Typing:
    total = Typing()
    for record in records:
        total.add(Typing(**record[key]))
    return total


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def measures(records: Sequence[dict[str, Any]], references: dict[str, str]) -> dict[str, Any]:
    refs = [references[r["ref"]] for r in records]
    whole, completion = typing_of(records, "whole_words"), typing_of(records, "with_completion")
    before = chrf([r["probe_before"] for r in records], refs)
    after = chrf([r["probe_after"] for r in records], refs)
    return {
        "verses": len(records),
        "chrf_first_suggestion": chrf([r["first_suggestion"] for r in records], refs),
        "word_prediction": whole.word_prediction if whole.words else None,
        "keystroke_saving": whole.keystroke_saving if whole.characters else None,
        "keystroke_saving_completion": completion.keystroke_saving if completion.characters else None,
        "probe_chrf_before": before,
        "probe_chrf_after": after,
        "probe_gain": difference(after, before),
    }


def mean_sd(values: Sequence[float | None]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(present) if present else None,
        "sd": statistics.stdev(present) if len(present) > 1 else None,
        "chapters": len(present),
    }


def chapters_of(records: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["chapter"] for r in records))


def variant_figures(walk: Walk, references: dict[str, str]) -> dict[str, Any]:
    records = walk.records
    chapters = {
        chapter: measures([r for r in records if r["chapter"] == chapter], references)
        for chapter in chapters_of(records)
    }
    near = [r for r in records if r["near_score"] >= NEAR_SCORE]
    far = [r for r in records if r["near_score"] < NEAR_SCORE]
    latencies = walk.engine.latencies
    return {
        "variant": walk.variant.key,
        "title": walk.variant.title,
        "engine": walk.variant.engine,
        "engine_id": walk.engine.engine_id,
        "engine_type": walk.engine.engine_type,
        "confirms": walk.variant.confirms,
        "error": walk.error,
        "retries": walk.retries,
        "walk_seconds": walk.seconds,
        "whole_walk": measures(records, references),
        "chapters": chapters,
        "over_chapters": {m: mean_sd([c[m] for c in chapters.values()]) for m in METRICS},
        "near": measures(near, references),
        "far": measures(far, references),
        "latency": {
            "translate": summary(walk.translate_seconds),
            "translate_per_target_token": summary(
                [s / n for s, n in zip(walk.translate_seconds, walk.translate_tokens, strict=True) if n]
            ),
            "word_graph": summary(latencies.get("word_graph", [])),
            "train_segment": summary(latencies.get("train_segment", [])),
            "client_suggestion": summary(walk.suggest_seconds),
        },
        "verses": records,
    }


def micro_build_seconds(records: list[dict[str, Any]], state: dict[str, Any]) -> list[float]:
    """For each completed micro-build, the seconds from the confirmed pair that started it (the
    last one confirmed before the build was created) to the build reading Completed, which is when
    the new revision serves (a build completes once the nodes serving the engine loaded it)."""
    confirmed = sorted(datetime.fromisoformat(r["confirmed_at"]) for r in records if r.get("confirmed_at"))
    out = []
    for build in state.get("after", {}).get("builds", []):
        if not (
            build["micro_build"] and build["state"] == "Completed" and build["created"] and build["finished"]
        ):
            continue
        created = datetime.fromisoformat(build["created"].replace("Z", "+00:00"))
        finished = datetime.fromisoformat(build["finished"].replace("Z", "+00:00"))
        before = [c for c in confirmed if c <= created]
        if before:
            out.append((finished - before[-1]).total_seconds())
    return out


def compare(variant: dict[str, Any], baseline: dict[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """`variant`'s figures less `baseline`'s: whole walk, near and far verses, and the mean and
    standard deviation over chapters of the per-chapter differences (chapters both walked)."""
    out: dict[str, Any] = {}
    for metric in metrics:
        shared = [c for c in variant["chapters"] if c in baseline["chapters"]]
        out[metric] = {
            "whole_walk": difference(variant["whole_walk"][metric], baseline["whole_walk"][metric]),
            "near": difference(variant["near"][metric], baseline["near"][metric]),
            "far": difference(variant["far"][metric], baseline["far"][metric]),
            "over_chapters": mean_sd(
                [difference(variant["chapters"][c][metric], baseline["chapters"][c][metric]) for c in shared]
            ),
        }
    return out


def median_ratio(
    figures: dict[str, dict[str, Any]], numerator: str, denominator: str, key: str = "translate"
) -> float | None:
    a = figures.get(numerator, {}).get("latency", {}).get(key)
    b = figures.get(denominator, {}).get("latency", {}).get(key)
    return a["median_ms"] / b["median_ms"] if a and b and b["median_ms"] else None


def comparisons(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    plain = figures.get(NO_LEARNING)
    gains = {
        key: compare(f, plain, GAIN_METRICS)
        for key, f in figures.items()
        if plain is not None and key != NO_LEARNING
    }
    smt = figures.get(SMT)
    versus_smt = {
        key: compare(figures[key], smt, ("word_prediction",))["word_prediction"]
        for key in ("nmt-fuzzy", "nmt-micro")
        if key in figures and smt is not None
    }
    pairs = [(a, b) for a, b in COST_BASELINES.items() if a in figures and b in figures]
    return {
        "gain_over_no_learning": gains,
        "word_prediction_vs_smt_transfer": versus_smt,
        "added_cost_per_translate": {
            "median_ratio": {f"{a} / {b}": median_ratio(figures, a, b) for a, b in pairs},
            "median_ratio_per_target_token": {
                f"{a} / {b}": median_ratio(figures, a, b, "translate_per_target_token") for a, b in pairs
            },
            "goal": ADDED_COST_GOAL,
        },
    }


# The service.


class RelabelledRest(processes.RestClient):
    """`bench.interactive`'s `upload_texts` and `build_engine` call the target side `sw`: this
    client sends `target_language` in its place (engines' `targetLanguage`, corpora's `language`)."""

    def __init__(self, rest: processes.RestClient, target_language: str) -> None:
        super().__init__(rest.base_url, rest.api_key)
        self.target_language = target_language

    def call(self, method: str, path: str, body: Any = None, timeout_s: float = 60) -> tuple[int, Any]:
        if method == "POST" and isinstance(body, dict):
            body = {
                k: self.target_language if k in ("targetLanguage", "language") and v == "sw" else v
                for k, v in body.items()
            }
        return super().call(method, path, body, timeout_s)


def engine_state(rest: processes.RestClient, engine_id: str) -> dict[str, Any]:
    """The engine's model revision and its builds so far (name, state, micro-build or not)."""
    engine = rest.expect(200, "GET", f"/api/v1/translation/engines/{engine_id}")
    builds = rest.expect(200, "GET", f"/api/v1/translation/engines/{engine_id}/builds")
    return {
        "languages": [engine.get("sourceLanguage"), engine.get("targetLanguage")],
        "model_revision": engine.get("modelRevision"),
        "builds": [
            {
                "name": b.get("name"),
                "state": b.get("state"),
                "micro_build": bool((b.get("options") or {}).get("microBuild")),
                "message": b.get("message"),
                "created": b.get("dateCreated"),
                "finished": b.get("dateFinished"),
            }
            for b in builds
        ],
    }


# Printing.


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def num(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def signed(value: float | None, scale: float = 1.0, unit: str = "") -> str:
    return "—" if value is None else f"{scale * value:+.1f}{unit}"


def spread_cell(section: dict[str, Any], scale: float = 1.0, sign: bool = False) -> str:
    if section["mean"] is None:
        return "—"
    mean = f"{scale * section['mean']:+.1f}" if sign else f"{scale * section['mean']:.1f}"
    return mean if section["sd"] is None else f"{mean} ± {scale * section['sd']:.1f}"


def scale_of(metric: str) -> float:
    return 100.0 if metric in ("word_prediction", "keystroke_saving", "keystroke_saving_completion") else 1.0


def print_report(report: dict[str, Any]) -> None:
    figures: dict[str, dict[str, Any]] = report["variants"]
    keys = list(figures)
    builds = report["builds"]
    states = report["engine_states"]
    comp = report["comparisons"]
    gains, versus_smt = comp["gain_over_no_learning"], comp["word_prediction_vs_smt_transfer"]
    ratios = comp["added_cost_per_translate"]["median_ratio"]
    token_ratios = comp["added_cost_per_translate"]["median_ratio_per_target_token"]

    Row = tuple[str, Callable[[str], str]]

    def walk_rows(section: str, label: str) -> list[Row]:
        def cell(metric: str) -> Callable[[str], str]:
            formatter = num if scale_of(metric) == 1 else pct
            return lambda k: formatter(figures[k][section][metric])

        return [
            (f"{label}chrF, first suggestion", cell("chrf_first_suggestion")),
            (f"{label}words predicted", cell("word_prediction")),
            (f"{label}keystrokes saved, whole words", cell("keystroke_saving")),
            (f"{label}keystrokes saved, completion", cell("keystroke_saving_completion")),
            (
                f"{label}probe chrF before → after",
                lambda k: (
                    f"{num(figures[k][section]['probe_chrf_before'])} → "
                    f"{num(figures[k][section]['probe_chrf_after'])}"
                ),
            ),
            (f"{label}probe gain", lambda k: signed(figures[k][section]["probe_gain"])),
        ]

    def chapter_row(metric: str, label: str, sign: bool = False) -> Row:
        return (label, lambda k: spread_cell(figures[k]["over_chapters"][metric], scale_of(metric), sign))

    def gain_row(metric: str, label: str, where: str) -> Row:
        def cell(k: str) -> str:
            if k not in gains:
                return ""
            section = gains[k][metric][where]
            if where == "over_chapters":
                return spread_cell(section, scale_of(metric), sign=True)
            return signed(section, scale_of(metric))

        return (label, cell)

    def latency(k: str, key: str, kind: str = "translate") -> str:
        section = figures[k]["latency"][kind]
        return "—" if section is None else f"{section[key]:.{1 if kind == 'translate' else 2}f}"

    def ratio(k: str, of: dict[str, float | None]) -> str:
        value = of.get(f"{k} / {COST_BASELINES.get(k)}")
        return "" if value is None else f"×{value:.2f}"

    def micro_cell(k: str, key: str) -> str:
        section = figures[k].get("micro_build_seconds")
        return "" if not section else f"{section[key] / 1000:.1f}"

    def builds_cell(k: str) -> str:
        state = states.get(figures[k]["engine"])
        if state is None or "after" not in state or not figures[k]["confirms"]:
            return ""
        micro = [b for b in state["after"]["builds"] if b["micro_build"]]
        done = sum(b["state"] == "Completed" for b in micro)
        revisions = f"r{state['before']['model_revision']}→{state['after']['model_revision']}"
        return f"{len(micro)}, {done} done, {revisions}" if micro else revisions

    near_n = next(iter(figures.values()))["near"]["verses"] if figures else 0
    far_n = next(iter(figures.values()))["far"]["verses"] if figures else 0
    rows: list[Row] = [
        ("build (s)", lambda k: f"{builds[figures[k]['engine']]['seconds']:.0f}"),
        ("confirms each verse", lambda k: "yes" if figures[k]["confirms"] else "no"),
        ("verses walked", lambda k: str(figures[k]["whole_walk"]["verses"])),
        *walk_rows("whole_walk", ""),
        chapter_row("chrf_first_suggestion", "  per chapter: chrF, mean ± sd"),
        chapter_row("word_prediction", "  per chapter: words predicted (%)"),
        chapter_row("keystroke_saving", "  per chapter: keystrokes saved (%)"),
        chapter_row("probe_gain", "  per chapter: probe gain", sign=True),
        *walk_rows("near", f"near ({near_n}): "),
        *walk_rows("far", f"far ({far_n}): "),
        ("translate median (ms)", lambda k: latency(k, "median_ms")),
        ("translate p95 (ms)", lambda k: latency(k, "p95_ms")),
        (f"added cost: median ratio (goal ≤ {ADDED_COST_GOAL:.2f})", lambda k: ratio(k, ratios)),
        (
            "translate median per target token (ms)",
            lambda k: latency(k, "median_ms", "translate_per_target_token"),
        ),
        ("added cost: ratio per target token", lambda k: ratio(k, token_ratios)),
        gain_row("chrf_first_suggestion", f"vs {NO_LEARNING}: chrF first", "whole_walk"),
        gain_row("chrf_first_suggestion", "  per chapter, mean ± sd", "over_chapters"),
        gain_row("word_prediction", f"vs {NO_LEARNING}: words predicted (pt)", "whole_walk"),
        gain_row("word_prediction", "  per chapter, mean ± sd", "over_chapters"),
        gain_row("keystroke_saving", f"vs {NO_LEARNING}: keystrokes saved (pt)", "whole_walk"),
        gain_row("keystroke_saving", "  per chapter, mean ± sd", "over_chapters"),
        gain_row("probe_chrf_after", f"vs {NO_LEARNING}: probe chrF after", "whole_walk"),
        gain_row("probe_chrf_after", "  per chapter, mean ± sd", "over_chapters"),
        gain_row("probe_chrf_after", "  near verses", "near"),
        gain_row("probe_chrf_after", "  far verses", "far"),
        (
            "words predicted vs smt-transfer (pt)",
            lambda k: signed(versus_smt[k]["whole_walk"], 100) if k in versus_smt else "",
        ),
        (
            "  per chapter, mean ± sd",
            lambda k: spread_cell(versus_smt[k]["over_chapters"], 100, sign=True) if k in versus_smt else "",
        ),
        ("micro-builds in the walk, model revision", builds_cell),
        ("micro-build: pair → revision serving, median (s)", lambda k: micro_cell(k, "median_ms")),
        ("micro-build: pair → revision serving, max (s)", lambda k: micro_cell(k, "max_ms")),
        ("retries (409/503)", lambda k: str(figures[k]["retries"])),
        ("walk (s)", lambda k: f"{figures[k]['walk_seconds']:.0f}"),
    ]
    width = max(18, *(len(k) + 2 for k in keys))
    label_width = 44
    print(f"\n{'':{label_width}}" + "".join(f"{k:>{width}}" for k in keys))
    for name, cell in rows:
        cells = [cell(k) for k in keys]
        if any(cells):
            print(f"{name:{label_width}}" + "".join(f"{c:>{width}}" for c in cells))

    chapter_width = max(22, width)
    print(f"\nper chapter: words predicted / chrF first suggestion / probe gain\n{'':{label_width}}", end="")
    print("".join(f"{k:>{chapter_width}}" for k in keys))
    first = next(iter(figures.values()), None)
    for chapter in chapters_of(first["verses"]) if first else []:
        line = f"{chapter} ({first['chapters'][chapter]['verses'] if first else 0} verses)"
        cells = []
        for k in keys:
            c = figures[k]["chapters"].get(chapter)
            cells.append(
                "—"
                if c is None
                else f"{pct(c['word_prediction'])} / {num(c['chrf_first_suggestion'])} / {signed(c['probe_gain'])}"
            )
        print(f"{line:{label_width}}" + "".join(f"{c:>{chapter_width}}" for c in cells))
    print(
        "added cost: "
        + ", ".join(f"{a} against {b}" for a, b in COST_BASELINES.items() if a in figures)
        + " (walked side by side, verse by verse)"
    )
    for k in keys:
        if figures[k]["error"]:
            print(f"{k}: stopped early: {figures[k]['error']}")
    for note in report["notes"]:
        print(f"note: {note}")


# Running it.


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--book", default="JHN", help="the book walked (no build trains on it)")
    parser.add_argument("--verses", type=int, default=120, help="walk the book's first N verses")
    parser.add_argument(
        "--target", default="swh1850", choices=sorted(TARGET_LANGUAGES), help="the target text"
    )
    parser.add_argument(
        "--train-pairs", type=int, help="train on this many pairs outside the book, spread evenly"
    )
    parser.add_argument(
        "--nmt-options", type=json.loads, default={}, help="build options of every nmt engine (JSON)"
    )
    parser.add_argument("--smt-options", type=json.loads, default=None, help="build options of smt-transfer")
    parser.add_argument("--no-micro-builds", action="store_true", help="skip the nmt-micro variant")
    parser.add_argument(
        "--micro-build-pairs",
        type=int,
        help=f"confirmed pairs that start a micro-build (the service's {MICRO_BUILD_PAIRS_ENV})",
    )
    parser.add_argument(
        "--home", type=Path, default=Path(".serval"), help="where the tiny base model's store is"
    )
    parser.add_argument("--data", type=Path, default=EBIBLE, help="the ebible-nt folder")
    parser.add_argument("--out", type=Path, default=Path("bench/results/learning.json"))
    args = parser.parse_args()

    if not fuzzy_matches_in_service():
        parser.error("this checkout's build options have no fuzzyMatches yet")
    notes: list[str] = []
    micro_in_service = micro_builds_in_service()
    micro = micro_in_service and not args.no_micro_builds
    if not micro_in_service and not args.no_micro_builds:
        notes.append("nmt-micro skipped: this checkout's API service has no micro-builds yet")
    if args.micro_build_pairs is not None:
        os.environ[MICRO_BUILD_PAIRS_ENV] = str(args.micro_build_pairs)

    pairs = ebible_pairs(args.data, SOURCE_TEXT, args.target)
    training = [p for p in pairs if book_of(p) != args.book]
    training = spread(training, args.train_pairs) if args.train_pairs else training
    verses = walked_verses(pairs, args.book, args.verses, training)
    if not verses:
        parser.error(f"no verse of {args.book} in {args.data}")
    references = {v.pair.ref: v.pair.target for v in verses}
    first = pairs.index(verses[0].pair)
    warm_segment = pairs[first - 1].source if first else training[0].source
    variants = [v for v in VARIANTS if micro or v.key != "nmt-micro"]
    specs = engine_specs(args.nmt_options, args.smt_options, micro_in_service)
    near = sum(v.near for v in verses)
    scores = sorted(v.near_score for v in verses)
    print(
        f"walking {len(verses)} verses of {args.book} ({verses[0].pair.ref} … {verses[-1].pair.ref}; "
        f"{near} near a training or earlier verse; best match scores: median "
        f"{statistics.median(scores):.2f}, max {scores[-1]:.2f}), {SOURCE_TEXT} → {args.target}, "
        f"{len(training)} training pairs; variants: {', '.join(v.key for v in variants)}",
        flush=True,
    )

    started = time.monotonic()
    builds: dict[str, Any] = {}
    engine_states: dict[str, dict[str, Any]] = {}
    phases: dict[str, float] = {}
    with local_service(args.home) as service:
        language = TARGET_LANGUAGES[args.target]
        rest = service.rest if language == "sw" else RelabelledRest(service.rest, language)
        corpora = upload_texts(rest, training)
        for key in dict.fromkeys(v.engine for v in variants):
            engine_type, options = specs[key]
            print(f"building {key} ({engine_type}, options {json.dumps(options)})", flush=True)
            engine_id, seconds = build_engine(rest, "translation", engine_type, corpora, options)
            builds[key] = {
                "engine_id": engine_id,
                "engine_type": engine_type,
                "options": options,
                "seconds": seconds,
            }
        walks = [
            Walk(v, ServalInteractiveEngine(service.url, service.api_key, builds[v.engine]["engine_id"]))
            for v in variants
        ]
        try:
            for name, confirming in (("not confirming", False), ("confirming", True)):
                chosen = [w for w in walks if w.variant.confirms == confirming]
                if confirming:
                    for w in chosen:
                        engine_states[w.variant.engine] = {"before": engine_state(rest, w.engine.engine_id)}
                print(f"walking ({name}): {', '.join(w.variant.key for w in chosen)}", flush=True)
                phases[name] = walk_phase(name, chosen, verses, warm_segment)
            for w in walks:
                if w.variant.confirms:
                    engine_states[w.variant.engine]["after"] = engine_state(rest, w.engine.engine_id)
            figures = {w.variant.key: variant_figures(w, references) for w in walks}
            for w in walks:
                if w.variant.confirms and w.variant.engine in engine_states:
                    waits = micro_build_seconds(w.records, engine_states[w.variant.engine])
                    figures[w.variant.key]["micro_build_seconds"] = summary(waits) if waits else None
        finally:
            for w in walks:
                w.engine.close()
    elapsed = time.monotonic() - started

    report = {
        "book": args.book,
        "target": args.target,
        "data": str(args.data),
        "train_pairs": len(training),
        "nmt_options": args.nmt_options,
        "smt_options": args.smt_options,
        "near_score": NEAR_SCORE,
        "walked": [
            {"ref": v.pair.ref, "near_score": v.near_score, "changed": list(v.changed), "probe": v.probe}
            for v in verses
        ],
        "builds": builds,
        "engine_states": engine_states,
        "seconds": {"total": elapsed, "builds": sum(b["seconds"] for b in builds.values()), "walks": phases},
        "comparisons": comparisons(figures),
        "notes": notes,
        "variants": figures,
    }
    print_report(report)
    print(
        f"\ntook {elapsed:.0f} s: builds {report['seconds']['builds']:.0f} s, walks "
        + ", ".join(f"{name} {s:.0f} s" for name, s in phases.items())
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
