"""Interactive quality: a simulated translator types held-out verses through sil-machine's
interactive translator against any translation engine of the service, over REST.

Verses: English→Swahili pairs of `../shared/data/ebible-nt` (engwebp → swh1850, line-aligned, blank
and merged verses skipped: 7,844 pairs); every 39th of them, 200 spread evenly over the New
Testament, is held out and the other 7,644 are what `--setup` trains on. The held-out verses of
Matthew and Mark (45) are not typed by default: the tiny NLLB base model of `serval demo` was
trained on those books. `--verses N` types N of the other 155, spread evenly; `--verses-file` types
others (TSV: `source<TAB>reference`, or `ref<TAB>source<TAB>reference`).

The protocol, per verse (source S, reference translation R, split into words by sil-machine's
`LatinWordTokenizer`, as the client splits the engine's words):
1. One `get-word-graph` call for S; sil-machine's `InteractiveTranslator` (the guarded one of
   `serval_cli/interactive.py`) holds the graph, and suggests a whole translation for whatever the
   translator has typed so far, with no further call to the service.
2. The translator's text is always a prefix of R. At a word boundary, with the words before it
   done, the translator reads the suggestion: if its next words agree with R's next words, the
   translator accepts the longest agreeing run with one keystroke (the words and the spaces
   between and after them come free); those words are **predicted**.
3. Otherwise the translator types R's next word and the spaces after it, one keystroke per
   character (whole words). In the *with completion* variant the translator looks at the
   suggestion after every character typed, and as soon as its word at that position is R's word
   (the typed characters made the translator complete it), accepts it and the agreeing words after
   it with one keystroke.
4. Until all of R is typed. Word-prediction accuracy = predicted words / R's words;
   keystroke-saving ratio = 1 − keystrokes / characters of R.

The *prefix endpoint* variant runs the whole-words protocol with the suggestions asked of the
service instead (`POST translate-prefix` with what has been typed, one call per word boundary): a
client without a word graph. Latencies (median/p95/max) are of the service's word-graph and
prefix calls and of the client's own suggestion step (sil-machine re-ranking the graph after a
keystroke). chrF is the graph's best path against R (the same as `translate`).

Against a running service:
    python -m bench.interactive --url http://127.0.0.1:8080 --api-key KEY --engine ID [--engine ID …]
Or start one here (API service and node on free loopback ports, in a temporary home; the tiny
NLLB base model of `serval demo` from --home's store, built first if missing), create engines of
the types asked on the training split, build them and type the verses:
    python -m bench.interactive --setup nmt smt-transfer [--verses 155] [--smt-options '{…}']
An `nmt` engine is built inference-only (the tiny base model as it is) unless --nmt-options is
given (then it fine-tunes on the training split); `smt-transfer` trains on the training split;
`echo` copies the source (a floor). Results are printed side by side and written as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from machine.annotations import Range
from machine.tokenization import LatinWordTokenizer
from machine.translation import WordGraph

from serval_cli import processes
from serval_cli.interactive import GuardedInteractiveTranslator, ServalInteractiveEngine
from tests.corpus import EBIBLE

HELD_OUT = 200
DEMO_BASE_BOOKS = ("MAT", "MRK")
"""The tiny NLLB base model of `serval demo` was trained on these books' verses (the same Swahili
text): their held-out verses are not typed unless `--exclude-books` says otherwise."""
LIBRARY_QUEUE_SIZE = 1000
"""sil-machine 1.9.2's bounded hypothesis queue: graphs with more hypotheses hang it unguarded."""
BUILD_TIMEOUT_S = 3 * 3600
TOKENIZER = LatinWordTokenizer()


@dataclass(frozen=True)
class Pair:
    ref: str
    source: str
    target: str


def ebible_pairs(data: Path = EBIBLE, source: str = "engwebp", target: str = "swh1850") -> list[Pair]:
    """Line-aligned verse pairs present in both texts (blank and merged `<range>` lines skipped)."""
    refs = (data / "vref.txt").read_text(encoding="utf-8").splitlines()
    sources = (data / f"{source}.txt").read_text(encoding="utf-8").splitlines()
    targets = (data / f"{target}.txt").read_text(encoding="utf-8").splitlines()
    return [
        Pair(ref, s.strip(), t.strip())
        for ref, s, t in zip(refs, sources, targets, strict=True)
        if s.strip() and t.strip() and "<range>" not in (s.strip(), t.strip())
    ]


def split(pairs: list[Pair], held_out: int = HELD_OUT) -> tuple[list[Pair], list[Pair]]:
    """(training, held out): `held_out` verses spread evenly over `pairs`."""
    every = max(1, len(pairs) // held_out)
    kept = set(range(every // 2, len(pairs), every)[:held_out])
    return [p for i, p in enumerate(pairs) if i not in kept], [p for i, p in enumerate(pairs) if i in kept]


def spread(items: list[Pair], count: int) -> list[Pair]:
    """`count` of `items` spread evenly over them (all of them when there are no more)."""
    if count >= len(items):
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


def read_verses(path: Path) -> list[Pair]:
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) == 2:
            pairs.append(Pair(f"{path.name}:{number}", fields[0], fields[1]))
        elif len(fields) == 3:
            pairs.append(Pair(*fields))
    return pairs


# The simulated translator.

Suggest = Callable[[str, int], list[str]]
"""(what has been typed, how many of the reference's words it holds complete) → the suggested
words from that word on (the first completes a partly typed word)."""


@dataclass
class Typing:
    words: int = 0
    characters: int = 0
    keystrokes: int = 0
    predicted: int = 0
    """Words accepted before any of their characters were typed."""
    completed: int = 0
    """Words accepted after some of their characters were typed (with completion)."""
    accepts: int = 0
    suggestions: int = 0

    def add(self, other: Typing) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    @property
    def word_prediction(self) -> float:
        return self.predicted / self.words if self.words else 0.0

    @property
    def keystroke_saving(self) -> float:
        return 1 - self.keystrokes / self.characters if self.characters else 0.0


def reference_spans(reference: str) -> list[Range[int]]:
    return list(TOKENIZER.tokenize_as_ranges(reference))


def agreeing(suggested: Sequence[str], reference: Sequence[str]) -> int:
    count = 0
    for a, b in zip(suggested, reference, strict=False):
        if a != b:
            break
        count += 1
    return count


def type_verse(reference: str, suggest: Suggest, completion: bool) -> Typing:
    """The protocol of the module's docstring for one verse."""
    spans = reference_spans(reference)
    words = [reference[s.start : s.end] for s in spans]
    typing = Typing(words=len(words), characters=len(reference))
    done = 0
    while done < len(words):
        start = spans[done].start
        typing.suggestions += 1
        run = agreeing(suggest(reference[:start], done), words[done:])
        if run:
            typing.keystrokes += 1
            typing.accepts += 1
            typing.predicted += run
            done += run
            continue
        if completion:
            for typed in range(1, len(words[done])):
                typing.suggestions += 1
                run = agreeing(suggest(reference[: start + typed], done), words[done:])
                if run:
                    typing.keystrokes += typed + 1
                    typing.accepts += 1
                    typing.completed += run
                    done += run
                    break
            if run:
                continue
        end = spans[done + 1].start if done + 1 < len(spans) else len(reference)
        typing.keystrokes += end - start
        done += 1
    return typing


def graph_suggester(translator: GuardedInteractiveTranslator, timings: list[float]) -> Suggest:
    def suggest(typed: str, done: int) -> list[str]:
        started = time.perf_counter()
        translator.set_prefix(typed)
        result = next(translator.get_current_results(), None)
        timings.append(time.perf_counter() - started)
        return [] if result is None else list(result.target_tokens)[done:]

    return suggest


def endpoint_suggester(engine: ServalInteractiveEngine, segment: str, reference: str) -> Suggest:
    spans = reference_spans(reference)

    def suggest(typed: str, done: int) -> list[str]:
        (result,) = engine.translate_prefix_json(segment, typed)
        translation = str(result["translation"])
        head = typed[: spans[done].start].rstrip()
        if translation.startswith(head):
            return list(TOKENIZER.tokenize(translation[len(head) :]))
        return list(TOKENIZER.tokenize(translation))[done:]

    return suggest


def hypotheses(graph: WordGraph) -> int:
    return sum(len(arc.target_tokens) for arc in graph.arcs) + len(graph.final_states)


def summary(seconds: list[float]) -> dict[str, float] | None:
    if not seconds:
        return None
    ordered = sorted(seconds)
    return {
        "count": len(ordered),
        "median_ms": 1000 * statistics.median(ordered),
        "p95_ms": 1000 * ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max_ms": 1000 * ordered[-1],
    }


@dataclass
class EngineRun:
    label: str
    engine_type: str
    whole_words: Typing = field(default_factory=Typing)
    with_completion: Typing = field(default_factory=Typing)
    prefix_endpoint: Typing | None = None
    suggest_seconds: list[float] = field(default_factory=list)
    hypotheses: list[int] = field(default_factory=list)
    hypotheses_over_queue: int = 0
    best_paths: list[str] = field(default_factory=list)
    error: str | None = None


def warm_up(engine: ServalInteractiveEngine, segment: str, timeout_s: float = 600) -> None:
    """Translate until the engine answers (a node loads its model first: not timed), then forget
    the latencies so far."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            engine.translate(segment)
            break
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code not in (409, 503) or time.monotonic() > deadline:
                raise
            time.sleep(2)
    engine.latencies.clear()


def run_engine(
    engine: ServalInteractiveEngine,
    label: str,
    verses: list[Pair],
    prefix_endpoint: bool,
    completion: bool = True,
) -> dict[str, Any]:
    """Type every verse against one engine; its figures as JSON."""
    run = EngineRun(label, engine.engine_type, prefix_endpoint=Typing() if prefix_endpoint else None)
    warm_up(engine, verses[0].source)
    for number, verse in enumerate(verses, 1):
        try:
            graph = engine.get_word_graph(verse.source)
        except httpx.HTTPStatusError as exc:
            run.error = f"get-word-graph answered {exc.response.status_code}: {exc.response.text}"
            break
        run.hypotheses.append(hypotheses(graph))
        run.hypotheses_over_queue += run.hypotheses[-1] > LIBRARY_QUEUE_SIZE
        best = next(engine.create_translator(verse.source, word_graph=graph).get_current_results(), None)
        run.best_paths.append(best.translation if best is not None else "")
        variants = [(run.whole_words, False)] + ([(run.with_completion, True)] if completion else [])
        for typing, completes in variants:
            translator = engine.create_translator(verse.source, word_graph=graph)
            typing.add(type_verse(verse.target, graph_suggester(translator, run.suggest_seconds), completes))
        if run.prefix_endpoint is not None:
            suggest = endpoint_suggester(engine, verse.source, verse.target)
            run.prefix_endpoint.add(type_verse(verse.target, suggest, completion=False))
        if number % 10 == 0 or number == len(verses):
            print(
                f"  {label}: {number}/{len(verses)} verses, words predicted "
                f"{run.whole_words.predicted}/{run.whole_words.words}",
                flush=True,
            )
    return figures(run, engine, verses)


def figures(run: EngineRun, engine: ServalInteractiveEngine, verses: list[Pair]) -> dict[str, Any]:
    typed = len(run.hypotheses)
    out: dict[str, Any] = {
        "label": run.label,
        "engine_id": engine.engine_id,
        "engine_type": run.engine_type,
        "verses": typed,
        "error": run.error,
        "chrf_best_path": chrf(run.best_paths, [v.target for v in verses[:typed]]),
    }
    variants = {"whole_words": run.whole_words}
    if run.with_completion.words:
        variants["with_completion"] = run.with_completion
    if run.prefix_endpoint is not None:
        variants["prefix_endpoint"] = run.prefix_endpoint
    for name, typing in variants.items():
        out[name] = {
            **asdict(typing),
            "word_prediction": typing.word_prediction,
            "keystroke_saving": typing.keystroke_saving,
        }
    out["latency"] = {
        "word_graph": summary(engine.latencies.get("word_graph", [])),
        "translate_prefix": summary(engine.latencies.get("translate_prefix", [])),
        "client_suggestion": summary(run.suggest_seconds),
    }
    out["graph_hypotheses"] = {
        "median": statistics.median(run.hypotheses) if run.hypotheses else None,
        "max": max(run.hypotheses, default=None),
        "over_1000": run.hypotheses_over_queue,
    }
    return out


def chrf(hypotheses: list[str], references: list[str]) -> float | None:
    try:
        import sacrebleu
    except ImportError:
        return None
    return float(sacrebleu.corpus_chrf(hypotheses, [references]).score) if hypotheses else None


def print_table(results: list[dict[str, Any]], builds: dict[str, Any]) -> None:
    def pct(value: float | None) -> str:
        return "—" if value is None else f"{100 * value:.1f}%"

    def ms(section: dict[str, Any] | None, key: str) -> str:
        return "—" if section is None else f"{section[key]:.0f}"

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("engine type", lambda r: str(r["engine_type"])),
        ("build (s)", lambda r: f"{builds[r['label']]['seconds']:.0f}" if r["label"] in builds else "—"),
        ("verses typed", lambda r: str(r["verses"])),
        ("chrF, best path", lambda r: "—" if r["chrf_best_path"] is None else f"{r['chrf_best_path']:.1f}"),
        (
            "words predicted (whole words)",
            lambda r: (
                f"{r['whole_words']['predicted']}/{r['whole_words']['words']} "
                f"({pct(r['whole_words']['word_prediction'])})"
            ),
        ),
        ("keystrokes saved, whole words", lambda r: pct(r["whole_words"]["keystroke_saving"])),
        (
            "keystrokes saved, with completion",
            lambda r: pct(r["with_completion"]["keystroke_saving"]) if "with_completion" in r else "—",
        ),
        (
            "words predicted, prefix endpoint",
            lambda r: pct(r["prefix_endpoint"]["word_prediction"]) if "prefix_endpoint" in r else "—",
        ),
        (
            "keystrokes saved, prefix endpoint",
            lambda r: pct(r["prefix_endpoint"]["keystroke_saving"]) if "prefix_endpoint" in r else "—",
        ),
        ("word graph median (ms)", lambda r: ms(r["latency"]["word_graph"], "median_ms")),
        ("word graph p95 (ms)", lambda r: ms(r["latency"]["word_graph"], "p95_ms")),
        ("word graph max (ms)", lambda r: ms(r["latency"]["word_graph"], "max_ms")),
        ("translate-prefix median (ms)", lambda r: ms(r["latency"]["translate_prefix"], "median_ms")),
        ("translate-prefix p95 (ms)", lambda r: ms(r["latency"]["translate_prefix"], "p95_ms")),
        ("client suggestion median (ms)", lambda r: ms(r["latency"]["client_suggestion"], "median_ms")),
        ("client suggestion p95 (ms)", lambda r: ms(r["latency"]["client_suggestion"], "p95_ms")),
        (
            "graph hypotheses median / max",
            lambda r: f"{r['graph_hypotheses']['median']} / {r['graph_hypotheses']['max']}",
        ),
        ("graphs over 1,000 hypotheses", lambda r: str(r["graph_hypotheses"]["over_1000"])),
    ]
    width = max(22, *(len(r["label"]) + 2 for r in results))
    print(f"\n{'':36}" + "".join(f"{r['label']:>{width}}" for r in results))
    for name, cell in rows:
        print(f"{name:36}" + "".join(f"{cell(r):>{width}}" for r in results))
    for r in results:
        if r["error"]:
            print(f"{r['label']}: stopped early: {r['error']}")


# Setting up a service of one's own (--setup).


@dataclass
class LocalService:
    rest: processes.RestClient
    api_key: str
    url: str
    home: Path


@contextlib.contextmanager
def local_service(shared_home: Path, node_families: Sequence[str] = ()) -> Iterator[LocalService]:
    """The API service and one inference node on free loopback ports, in a temporary home whose
    model store is `shared_home`'s (where the tiny base model is), both stopped afterwards."""
    from serval_cli.bootstrap import create_credentials
    from serval_cli.demo import ensure_base_model
    from serval_common.settings import Settings, StoreSettings

    shared = Settings(home=shared_home)
    ensure_base_model(shared, steps=1000, rebuild=False)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        settings = Settings(home=home, store=StoreSettings(url=shared.resolved_store_url))
        api_key, node_token = create_credentials(settings, "bench")
        grpc_port, rest_port = processes.free_port(), processes.free_port()
        env = {"SERVAL_STORE__URL": settings.resolved_store_url}
        running: list[subprocess.Popen[bytes]] = []
        try:
            running.append(
                processes.start(
                    [
                        "api",
                        "--home",
                        str(home),
                        "--grpc-port",
                        str(grpc_port),
                        "--rest-port",
                        str(rest_port),
                    ],
                    home / "api.log",
                    env,
                )
            )
            url = f"http://127.0.0.1:{rest_port}"
            rest = processes.RestClient(url, api_key)
            rest.wait_until_up(running[0])
            node_env = {**env, "SERVAL_NODE__TOKEN": node_token}
            if node_families:
                node_env["SERVAL_NODE__FAMILIES"] = json.dumps(list(node_families))
            running.append(
                processes.start(
                    ["node", "--home", str(home), "--api-address", f"127.0.0.1:{grpc_port}"],
                    home / "node.log",
                    node_env,
                )
            )
            rest.wait_for_node(running[1])
            yield LocalService(rest, api_key, url, home)
        finally:
            for process in reversed(running):
                processes.stop(process)


def upload_texts(rest: processes.RestClient, pairs: list[Pair]) -> tuple[str, str]:
    """The source and target sides as one Text file and corpus each: (source id, target id)."""
    ids = []
    for language, lines in (("en", [p.source for p in pairs]), ("sw", [p.target for p in pairs])):
        contents = "".join(f"{line}\n" for line in lines).encode()
        name = f"ebible-nt-train-{language}.txt"
        code, file = rest.upload("/api/v1/files", {"format": "Text", "name": name}, name, contents)
        if code != 201:
            raise RuntimeError(f"uploading the {language} text answered {code}: {file}")
        corpus = rest.expect(
            201,
            "POST",
            "/api/v1/corpora",
            {"name": name, "language": language, "files": [{"fileId": file["id"], "textId": "NT"}]},
        )
        ids.append(str(corpus["id"]))
    return ids[0], ids[1]


def build_engine(
    rest: processes.RestClient,
    kind: str,
    engine_type: str,
    corpora: tuple[str, str] | None,
    options: dict[str, Any] | None,
    timeout_s: float = BUILD_TIMEOUT_S,
) -> tuple[str, float]:
    """Create an engine (`kind`: `translation` or `word-alignment`), give it a parallel corpus of
    `corpora` (source, target) when training, build it; (engine id, seconds to Completed)."""
    base = f"/api/v1/{kind}/engines"
    engine = rest.expect(
        201,
        "POST",
        base,
        {"name": f"bench {engine_type}", "sourceLanguage": "en", "targetLanguage": "sw", "type": engine_type},
    )
    path = f"{base}/{engine['id']}"
    config: dict[str, Any] = {"name": f"bench {engine_type}", "trainOn": []}
    if corpora is not None:
        parallel = rest.expect(
            201,
            "POST",
            f"{path}/parallel-corpora",
            {"name": "ebible-nt train", "sourceCorpusIds": [corpora[0]], "targetCorpusIds": [corpora[1]]},
        )
        config["trainOn"] = [{"parallelCorpusId": parallel["id"]}]
    if options:
        config["options"] = options
    started = time.monotonic()
    build = rest.expect(201, "POST", f"{path}/builds", config)
    while build["state"] in ("Pending", "Active"):
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(
                f"{engine_type} build {build['id']} still {build['state']} after {timeout_s:g} s"
            )
        status, polled = rest.call(
            "GET", f"{path}/builds/{build['id']}?min-revision={build['revision'] + 1}", timeout_s=90
        )
        build = polled if status == 200 else build
    seconds = time.monotonic() - started
    if build["state"] != "Completed":
        raise RuntimeError(
            f"{engine_type} build {build['id']} ended {build['state']}: {build.get('message')}"
        )
    print(
        f"  {engine_type} engine {engine['id']} built in {seconds:.0f} s: {build.get('message') or ''}",
        flush=True,
    )
    return str(engine["id"]), seconds


def type_engines(
    url: str, api_key: str, engine_ids: list[str], verses: list[Pair], prefix_endpoint: bool, completion: bool
) -> list[dict[str, Any]]:
    results = []
    for engine_id in engine_ids:
        with ServalInteractiveEngine(url, api_key, engine_id) as engine:
            label = f"{engine.engine_type} {engine_id[:6]}"
            print(f"typing {len(verses)} verses against {label}", flush=True)
            results.append(run_engine(engine, label, verses, prefix_endpoint, completion))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="the service's REST base URL")
    parser.add_argument("--api-key")
    parser.add_argument("--engine", action="append", default=[], help="a translation engine id (repeatable)")
    parser.add_argument(
        "--setup",
        nargs="+",
        metavar="TYPE",
        help="start a service here, create and build engines of these types",
    )
    parser.add_argument("--verses", type=int, default=HELD_OUT, help="how many held-out verses to type")
    parser.add_argument("--verses-file", type=Path, help="type these verses instead (TSV)")
    parser.add_argument(
        "--exclude-books",
        nargs="*",
        default=list(DEMO_BASE_BOOKS),
        help="held-out verses of these books are not typed (default: the tiny base model's training books)",
    )
    parser.add_argument(
        "--train-pairs", type=int, help="train --setup engines on this many pairs (default: all)"
    )
    parser.add_argument(
        "--nmt-options", type=json.loads, help="build options of the nmt engine: it then trains"
    )
    parser.add_argument(
        "--smt-options", type=json.loads, default=None, help="build options of the smt-transfer engine"
    )
    parser.add_argument("--no-prefix-endpoint", action="store_true", help="skip the prefix-endpoint variant")
    parser.add_argument(
        "--no-completion",
        action="store_true",
        help="skip the with-completion variant (a suggestion per character)",
    )
    parser.add_argument(
        "--home", type=Path, default=Path(".serval"), help="where the tiny base model's store is"
    )
    parser.add_argument("--data", type=Path, default=EBIBLE, help="the ebible-nt folder")
    parser.add_argument("--out", type=Path, default=Path("bench/results/interactive.json"))
    args = parser.parse_args()

    training, held_out = split(ebible_pairs(args.data))
    if args.verses_file:
        verses = read_verses(args.verses_file)[: args.verses]
    else:
        excluded = set(args.exclude_books)
        verses = spread([v for v in held_out if v.ref.split()[0] not in excluded], args.verses)
    training = training[: args.train_pairs] if args.train_pairs else training
    prefix_endpoint = not args.no_prefix_endpoint
    completion = not args.no_completion
    builds: dict[str, Any] = {}
    if args.setup:
        with local_service(args.home) as service:
            corpora = upload_texts(service.rest, training)
            engine_ids = []
            for engine_type in args.setup:
                trains = engine_type == "smt-transfer" or (
                    engine_type == "nmt" and args.nmt_options is not None
                )
                options = {"nmt": args.nmt_options, "smt-transfer": args.smt_options}.get(engine_type)
                engine_id, seconds = build_engine(
                    service.rest, "translation", engine_type, corpora if trains else None, options
                )
                engine_ids.append(engine_id)
                builds[f"{engine_type} {engine_id[:6]}"] = {
                    "seconds": seconds,
                    "train_pairs": len(training) if trains else 0,
                    "options": options,
                }
            results = type_engines(
                service.url, service.api_key, engine_ids, verses, prefix_endpoint, completion
            )
    else:
        if not (args.url and args.api_key and args.engine):
            parser.error("give --url, --api-key and --engine, or --setup")
        results = type_engines(args.url, args.api_key, args.engine, verses, prefix_endpoint, completion)

    print_table(results, builds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "verses": [v.ref for v in verses],
                "data": None if args.verses_file else f"{args.data} engwebp→swh1850, {HELD_OUT} held out",
                "builds": builds,
                "engines": results,
            },
            indent=2,
            ensure_ascii=False,
        )
    )
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
