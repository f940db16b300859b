"""`serval demo`: the whole system on one machine with no servers to install.

Builds (or reuses) the tiny base model, starts the API service and one inference node as
separate processes on free loopback ports, creates an English→Swahili engine, runs an
inference-only build, translates a few verses over REST and gRPC with their n-best lists, then
stops everything. Any failed step exits non-zero.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_cli.config import load_settings
from serval_cli.corpus import VersePair, demo_pairs
from serval_common.settings import Settings

console = Console()

BASE_MODEL = "tiny-nllb"
DEMO_VERSES = ("MAT 5:9", "MAT 6:11", "MRK 1:1", "LUK 2:11")


def demo(
    home: Annotated[Path | None, typer.Option(envvar="SERVAL_HOME", help="data folder")] = None,
    steps: Annotated[int, typer.Option(help="training steps when the tiny base model is built")] = 1000,
    rebuild: Annotated[bool, typer.Option(help="rebuild the tiny base model even if it exists")] = False,
) -> None:
    """Run the whole path on embedded defaults and print real model output."""
    settings = load_settings(home=home)
    started = time.monotonic()
    running: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        ensure_base_model(settings, steps, rebuild)
        _run(settings, running)
    except Exception as exc:
        console.print(f"[bold red]demo failed:[/] {exc}")
        for name, _ in running:
            console.print(f"  see {settings.home / 'logs' / f'demo-{name}.log'}")
        raise typer.Exit(1) from None
    finally:
        codes = {name: processes.stop(process) for name, process in reversed(running)}
        if codes:
            console.print("stopped " + ", ".join(f"{name} (exit {code})" for name, code in codes.items()))
    console.print(f"[bold green]demo finished[/] in {time.monotonic() - started:.0f} s")


def ensure_base_model(settings: Settings, steps: int, rebuild: bool) -> None:
    from serval_cli.base_models import make_tiny
    from serval_common.store import store_from_settings

    store = store_from_settings(settings)
    if store.exists(f"base-models/{BASE_MODEL}/manifest.json") and not rebuild:
        console.print(f"reusing base model [bold]{BASE_MODEL}[/] in {store.url}")
        return
    pairs = demo_pairs()
    console.print(f"building base model [bold]{BASE_MODEL}[/] on {len(pairs)} English–Swahili verse pairs")
    make_tiny(
        store,
        BASE_MODEL,
        source_lines=[p.source for p in pairs],
        target_lines=[p.target for p in pairs],
        source_code="eng_Latn",
        target_code="swh_Latn",
        steps=steps,
    )


def _run(settings: Settings, running: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    api_key, node_token = create_credentials(settings, "demo")
    grpc_port, rest_port = processes.free_port(), processes.free_port()
    home = str(settings.home)
    logs = settings.home / "logs"
    api_args = ["api", "--home", home, "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)]
    running.append(("api", processes.start(api_args, logs / "demo-api.log")))
    rest = processes.RestClient(f"http://127.0.0.1:{rest_port}", api_key)
    rest.wait_until_up(running[0][1])
    console.print(f"API service up: REST :{rest_port}, gRPC :{grpc_port}")

    node_args = ["node", "--home", home, "--api-address", f"127.0.0.1:{grpc_port}", "--node-id", "demo-node"]
    running.append(
        ("node", processes.start(node_args, logs / "demo-node.log", {"SERVAL_NODE__TOKEN": node_token}))
    )
    rest.wait_for_node(running[1][1])
    console.print("inference node demo-node registered")

    engine = rest.expect(
        201,
        "POST",
        "/api/v1/translation/engines",
        {"name": "demo en-sw", "sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"},
    )
    engine_path = f"/api/v1/translation/engines/{engine['id']}"
    console.print(f"engine {engine['id']}: en → sw (NLLB eng_Latn → swh_Latn)")
    build = rest.expect(201, "POST", f"{engine_path}/builds", {"name": "inference-only", "trainOn": []})
    build = _wait_for_build(rest, f"{engine_path}/builds/{build['id']}", build)
    if build["state"] != "Completed":
        raise RuntimeError(f"build {build['id']} ended {build['state']}: {build.get('message', '')}")
    engine = rest.expect(200, "GET", engine_path)
    console.print(f"build {build['id']} completed; engine model revision {engine['modelRevision']}")

    verses = {p.ref: p for p in demo_pairs()}
    _show(rest, engine_path, [verses[ref] for ref in DEMO_VERSES])
    _show_grpc(grpc_port, api_key, engine["id"], verses[DEMO_VERSES[0]])


def _wait_for_build(rest: processes.RestClient, path: str, build: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while build["state"] in ("Pending", "Active") and time.monotonic() < deadline:
        code, payload = rest.call("GET", f"{path}?min-revision={build['revision'] + 1}", timeout_s=50)
        if code == 200:
            build = payload
            progress = build.get("progress")
            console.print(f"  build {build['state']}" + (f" {progress:.0%}" if progress is not None else ""))
        elif code != 408:
            raise RuntimeError(f"watching the build answered {code}: {payload}")
    return build


def _show(rest: processes.RestClient, engine_path: str, verses: list[VersePair]) -> None:
    grid = Table("verse", "English", "model (n-best, REST)", "Swahili reference", show_lines=True)
    for verse in verses:
        results = rest.expect(200, "POST", f"{engine_path}/translate/3", verse.source)
        if not results or not results[0]["targetTokens"]:
            raise RuntimeError(f"empty translation for {verse.ref}")
        n_best = "\n".join(f"{rank}. {r['translation']}" for rank, r in enumerate(results, 1))
        grid.add_row(verse.ref, verse.source, n_best, verse.target)
    console.print(grid)


def _show_grpc(grpc_port: int, api_key: str, engine_id: str, verse: VersePair) -> None:
    import grpc

    from serval.translation.v1 import engine_pb2, engine_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        response = engine_pb2_grpc.TranslationEngineApiStub(channel).Translate(
            engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine_id, segment=verse.source, n=1),
            metadata=(("x-api-key", api_key),),
            timeout=60,
        )
    result = response.results[0]
    console.print(f"gRPC Translate {verse.ref}: [bold]{result.translation}[/]")
    pairs = [
        f"{result.source_tokens[a.source_index]}→{result.target_tokens[a.target_index]}"
        for a in result.alignment
    ]
    confidences = ", ".join(f"{c:.2f}" for c in result.confidences)
    console.print(f"  confidences: {confidences}\n  alignment: {' '.join(pairs)}")
