"""One scenario's figures, the side-by-side table and the JSON file."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

BASELINES = ("direct", "naive", "transformers")


@dataclass
class Measurement:
    """`latencies_s` holds one entry per request (empty where a latency means nothing, as for one
    batch over every sentence); `mean_batch` is sentences per backend call."""

    model: str
    scenario: str
    requests: int
    seconds: float
    target_tokens: int
    mean_batch: float
    latencies_s: list[float] = field(default_factory=list)
    failed: int = 0
    baseline: str | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each process used during the scenario (full path only)."""
    engine_s: float | None = None
    """The node's backend seconds during the scenario (full path only): what the node's CPU beyond
    its engine is measured against, in the same run."""

    @property
    def node_beyond_engine_ms(self) -> float | None:
        """The node's CPU per request less its backend's time per request. Exact with one client
        (the backend's thread has the node's core to itself while it runs); with many, the node's
        event loop shares the core with running batches, so this understates it."""
        if self.engine_s is None or "node" not in self.cpu_s or not self.requests:
            return None
        return 1000 * (self.cpu_s["node"] - self.engine_s) / self.requests

    @property
    def sentences_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.target_tokens / self.seconds if self.seconds else 0.0

    def percentile_ms(self, q: float) -> float | None:
        if not self.latencies_s:
            return None
        if len(self.latencies_s) == 1:
            return 1000 * self.latencies_s[0]
        return 1000 * statistics.quantiles(self.latencies_s, n=100, method="inclusive")[round(q * 100) - 1]

    def summary(self, baselines: dict[str, Measurement]) -> dict[str, Any]:
        row = asdict(self)
        del row["latencies_s"]
        row.update(
            sentences_per_s=self.sentences_per_s,
            tokens_per_s=self.tokens_per_s,
            p50_ms=self.percentile_ms(0.50),
            p95_ms=self.percentile_ms(0.95),
            p99_ms=self.percentile_ms(0.99),
            node_beyond_engine_ms=self.node_beyond_engine_ms,
        )
        for name, base in baselines.items():
            row[f"vs_{name}"] = self.tokens_per_s / base.tokens_per_s if base.tokens_per_s else None
        return row


def baselines_of(rows: list[Measurement], model: str) -> dict[str, Measurement]:
    return {row.baseline: row for row in rows if row.model == model and row.baseline}


def print_table(rows: list[Measurement], console: Console) -> None:
    for model in dict.fromkeys(row.model for row in rows):
        baselines = baselines_of(rows, model)
        table = Table(title=f"{model}: ratios are target tokens/s over the baseline's, same run")
        for column in (
            "scenario",
            "requests",
            "failed",
            "sent/s",
            "tok/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "batch",
            "CPU ms/req: clients·api·node",
            "node beyond engine ms/req",
        ):
            table.add_column(column, justify="left" if column == "scenario" else "right")
        for name in baselines:
            table.add_column(f"vs {name}", justify="right")
        for row in (r for r in rows if r.model == model):
            cells = [
                row.scenario,
                str(row.requests),
                str(row.failed),
                f"{row.sentences_per_s:.1f}",
                f"{row.tokens_per_s:.0f}",
                *(_ms(row.percentile_ms(q)) for q in (0.50, 0.95, 0.99)),
                f"{row.mean_batch:.1f}",
                " · ".join(f"{1000 * row.cpu_s[p] / row.requests:.1f}" for p in ("clients", "api", "node"))
                if row.cpu_s
                else "",
                _ms(row.node_beyond_engine_ms),
                *(f"{row.tokens_per_s / base.tokens_per_s:.2f}×" for base in baselines.values()),
            ]
            table.add_row(*cells)
        console.print(table)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def write_json(path: Path, rows: list[Measurement], extra: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    summaries = [row.summary(baselines_of(rows, row.model)) for row in rows]
    path.write_text(json.dumps({**extra, "scenarios": summaries}, indent=2) + "\n", encoding="utf-8")


def print_lifecycle(models: dict[str, dict[str, Any]], console: Console) -> None:
    """Hot swap, memory, cold load and idle CPU, one row per model."""
    table = Table(title="models: hot swap under load, node memory, cold load from S3, idle CPU")
    columns = (
        "model", "swap: completed → ready s", "fetch s", "load s", "ready after files local s",
        "→ first answer s", "requests", "failed", "node at start MB", "model MB", "models held", "node RSS MB",
        "RSS per model byte", "fixed base MB", "S3 download s", "MB/s", "load s", "idle CPU ms/s: api·node",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, figures in models.items():
        swap, memory, cold = figures["hot_swap"], figures["memory"], figures["cold_load_s3"]
        idle = figures.get("idle")
        table.add_row(
            name,
            _s(swap["completed_to_ready_s"]), _s(swap["node_fetch_s"]), _s(swap["node_load_s"]),
            _s(swap["ready_after_files_local_s"]), _s(swap["completed_to_first_answer_s"]),
            str(swap["requests"]), str(swap["failed"]),
            f"{memory['start_rss_mb']:.0f}", f"{memory['model_mb']:.0f}", str(memory["models_held"]),
            f"{memory['rss_mb']:.0f}", f"{memory['rss_per_model_byte']:.2f}", f"{memory['fixed_base_mb']:.0f}",
            _s(cold["download_s"]), f"{cold['download_mb_per_s']:.0f}", _s(cold["load_s"]),
            "" if idle is None else f"{idle['api_ms_per_s']:.1f} · {idle['node_ms_per_s']:.1f}",
        )  # fmt: skip
    console.print(table)


def _s(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def print_shared_weights(models: dict[str, dict[str, Any]], console: Console) -> None:
    """The K-engines scenario, one row per model and K."""
    table = Table(title="K engines on one base model: the same clients spread over K engines, same run")
    columns = (
        "model", "engines", "clients", "sent/s", "tok/s", "vs one engine", "batch", "engines/batch",
        "node RSS MB", "new engine's first request ms", "warm request ms", "loads",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, figures in models.items():
        shared = figures.get("shared_weights")
        if not shared:
            continue
        for row in shared["rows"]:
            first, warm = row["new_engine_first_request_s"], row["warm_request_s"]
            table.add_row(
                name, str(row["engines"]), str(shared["clients"]), f"{row['sentences_per_s']:.1f}",
                f"{row['tokens_per_s']:.0f}", f"{row['vs_one_engine']:.2f}×", f"{row['mean_batch']:.1f}",
                f"{row['engines_per_batch']:.1f}", f"{row['node_rss_mb']:.0f}",
                "" if first is None else f"{1000 * first:.1f}", "" if warm is None else f"{1000 * warm:.1f}",
                "" if row["loads_for_new_engine"] is None else f"{row['loads_for_new_engine']:.0f}",
            )  # fmt: skip
    console.print(table)
