"""What a translator using SIL Converters' NLLB Translator feels: the converter sends one sentence
per request, strictly one after another, so single-request latency is the figure. Serial
single-sentence requests over the converter's own dialect (`POST /api/v1/translate/`, exactly as it
sends them) against an API service and a node process, with an unbound key (the public base
model) and a key bound to an inference-only engine of the same model, beside one CTranslate2
`translate_batch` call per sentence on the same sentences, model and decoding settings.

    .venv/bin/python -m bench.sil_converters [--requests 40] [--home .serval] [--out FILE]

The tiny base model is built into `{home}/store` on first use (as `serval demo` does).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from bench import baselines
from bench.report import Measurement
from bench.system import System, running_system
from bench.workload import SOURCE_CODE, TARGET_CODE, Workload, verses
from serval_api.service import text_translation
from serval_common.manifest import fetch_folder
from serval_common.settings import NodeSettings, Settings
from serval_common.store import store_from_settings

BASE_MODEL = "tiny-nllb"
OWNER = "bench"
"""The owner `running_system`'s API key acts for."""
TRANSLATE_PATH = "/api/v1/translate/"
WARM_UP_S = 120.0
console = Console(stderr=True)


class Converter:
    """The converter's request: its headers, Newtonsoft's compact camelCase JSON, one connection
    kept alive (as WinHttpHandler keeps it)."""

    def __init__(self, rest_url: str, key: str) -> None:
        self.http = httpx.Client(base_url=rest_url, timeout=60, follow_redirects=False)
        self.http.headers = httpx.Headers({"Authorization": f"SIL-NLLB-Auth-Key {key}"})

    def translate(self, text: str) -> httpx.Response:
        body = {"sourceLanguage": SOURCE_CODE, "targetLanguage": TARGET_CODE, "text": text}
        return self.http.post(
            TRANSLATE_PATH,
            content=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
            headers={"Content-Type": "application/json; charset=utf-8"},
        )

    def warm_up(self, text: str) -> None:
        """Until the model is loaded: a cold model answers 503 'loading, try again'."""
        deadline = time.monotonic() + WARM_UP_S
        while (answer := self.translate(text)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(float(answer.headers.get("retry-after", "1")) / 5)
        if answer.status_code != 200:
            raise RuntimeError(f"warm-up answered {answer.status_code}: {answer.text}")

    def serial(self, workload: Workload, scenario: str, count: int) -> Measurement:
        self.warm_up(workload.sentences[0])
        latencies: list[float] = []
        failed = 0
        started = time.perf_counter()
        for sentence in workload.sentences[:count]:
            begun = time.perf_counter()
            answer = self.translate(sentence)
            latencies.append(time.perf_counter() - begun)
            if answer.status_code != 200 or not json.loads("[" + answer.text + "]")[0]["translatedText"]:
                failed += 1
        seconds = time.perf_counter() - started
        # target tokens are not returned by this dialect; the sentence rate is the comparable figure
        return Measurement(workload.name, scenario, count, seconds, 0, 1.0, latencies, failed)

    def close(self) -> None:
        self.http.close()


def single_sentences(count: int) -> list[str]:
    """`count` verses that are one sentence each, as the service splits them: the converter sends
    one sentence a request, and the service then translates exactly what the direct call does."""
    found = [v for v in verses(20 * count) if len(text_translation.split_sentences(v, SOURCE_CODE)) == 1]
    if len(found) < count:
        raise SystemExit(f"only {len(found)} single-sentence verses found")
    step = len(found) / count
    return [found[int(i * step)] for i in range(count)]


def direct(workload: Workload, count: int, when: str) -> Measurement:
    """One CTranslate2 `translate_batch` call per sentence, one after another (run before and after
    the service: the shared machine's speed drifts)."""
    row = baselines.naive(workload, count)
    row.scenario = f"direct: CTranslate2 translate_batch, one sentence a call ({when})"
    return row


def bound_key(system: System) -> str:
    """A key bound to a new inference-only engine on the base model (the admin API)."""
    engine_id = system.create_engine(BASE_MODEL)
    body = {"owner": OWNER, "scopes": ["read:translation_engines"], "engineId": engine_id}
    return str(system.admin.expect(201, "POST", "/api/v1/admin/api-keys", body)["key"])


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/sil_converters.py", description=__doc__)
    parser.add_argument("--requests", type=int, default=40, help="serial single-sentence requests")
    parser.add_argument("--home", type=Path, default=Path(".serval"), help="where the base models are kept")
    parser.add_argument("--out", type=Path, default=Path("bench/results/sil_converters.json"))
    args = parser.parse_args()

    from serval_cli.demo import ensure_base_model

    settings = Settings(home=args.home)
    ensure_base_model(settings, steps=1000, rebuild=False)
    node = NodeSettings()
    rows: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="serval-bench-sil-") as tmp:
        manifest, folder = fetch_folder(
            store_from_settings(settings), f"base-models/{BASE_MODEL}", Path(tmp) / "models"
        )
        sentences = single_sentences(args.requests)
        workload = Workload(BASE_MODEL, folder, sentences, node, manifest.max_positions)
        console.rule(f"{BASE_MODEL}: {args.requests} sentences {SOURCE_CODE} → {TARGET_CODE}, one at a time")
        rows.append(direct(workload, args.requests, "before"))
        with running_system(Path(tmp) / "home", settings.resolved_store_url, node) as system:
            unbound = Converter(system.rest_url, system.api_key)
            rows.append(
                unbound.serial(workload, "SIL Converters, unbound key (public base model)", args.requests)
            )
            unbound.close()
            bound = Converter(system.rest_url, bound_key(system))
            rows.append(bound.serial(workload, "SIL Converters, key bound to an engine", args.requests))
            bound.close()
        rows.append(direct(workload, args.requests, "after"))
    figures = [
        {
            "scenario": row.scenario,
            "requests": row.requests,
            "failed": row.failed,
            "p50_ms": row.percentile_ms(0.50),
            "p95_ms": row.percentile_ms(0.95),
            "sentences_per_s": row.sentences_per_s,
        }
        for row in rows
    ]
    table = Table(title=f"{BASE_MODEL}, beam {node.beam_size}: serial single-sentence requests")
    for column in ("scenario", "requests", "failed", "p50 ms", "p95 ms", "sentences/s"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for row in figures:
        table.add_row(
            str(row["scenario"]), str(row["requests"]), str(row["failed"]),
            f"{row['p50_ms']:.1f}", f"{row['p95_ms']:.1f}", f"{row['sentences_per_s']:.1f}",
        )  # fmt: skip
    Console(width=160).print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"model": BASE_MODEL, "beam_size": node.beam_size, "scenarios": figures}
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
