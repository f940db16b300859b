"""`serval admin nodes …`: list and control inference nodes through a running API service (the
admin REST API, so an API key with the `admin` scope).

Every node keeps a session with every API replica, so any replica's URL shows and controls the
whole fleet.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from serval_cli.builds import DEFAULT_URL, ApiKey, Url
from serval_cli.processes import NETWORK_ERRORS, RestClient

app = typer.Typer(
    help="Inference nodes: list, drain, undrain, load, unload (over REST).", no_args_is_help=True
)

NodeId = Annotated[str, typer.Argument(help="the node's id, as `serval admin nodes list` shows it")]
EngineId = Annotated[str, typer.Argument(help="the engine's id")]
ADMIN_NODES = "/api/v1/admin/nodes"


def _console() -> Console:
    """The terminal's width on a terminal; wide enough for whole rows when piped or captured."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _call(url: str, api_key: str | None, method: str, path: str, body: Any = None, ok: int = 200) -> Any:
    try:
        code, payload = RestClient(url, api_key).call(method, path, body)
    except NETWORK_ERRORS as exc:
        _console().print(f"[red]{url} unreachable: {exc}[/]")
        raise typer.Exit(1) from None
    if code != ok:
        message = payload.get("message") if isinstance(payload, dict) else payload
        _console().print(f"[red]{method} {path} answered {code}: {message}[/]")
        raise typer.Exit(1)
    return payload


def _size(count: int) -> str:
    if not count:
        return ""
    return f"{count / (1 << 30):.1f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.0f} MiB"


def _models(node: dict[str, Any]) -> str:
    """One line per loaded model (a set of weights, with its size), then the revisions it serves."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for model in node.get("models", []):
        groups.setdefault(model.get("weights") or f"{model['engineId']}/{model['revision']}", []).append(
            model
        )
    held = []
    for weights, revisions in groups.items():
        size = max(revision.get("sizeBytes", 0) for revision in revisions)
        name = weights[:14] if weights.startswith("w-") else weights
        held.append(f"{name}{f' ({_size(size)})' if size else ''}:")
        for model in revisions:
            text = f"  {model['engineId']}/{model['revision']} {model['state']}"
            if model.get("message"):
                text += f" ({model['message']})"
            held.append(text)
    return "\n".join(held)


def _print(nodes: list[dict[str, Any]]) -> None:
    grid = Table(
        "node", "status", "device", "memory free/total", "load", "models", "last heartbeat", box=None
    )
    for node in nodes:
        status = node["status"] + (f" ({node['drainReason']})" if node.get("drained") else "")
        load = f"{node['inFlight']}/{node['slots']}" if node.get("slots") else ""
        memory = f"{_size(node.get('memoryFreeBytes', 0))} / {_size(node.get('memoryTotalBytes', 0))}"
        grid.add_row(
            node["id"],
            status,
            node.get("device", ""),
            memory if node.get("slots") else "",
            load,
            _models(node),
            node["lastSeen"][:19].replace("T", " "),
        )
    _console().print(grid)


@app.command("list")
def list_nodes(url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """List nodes: status, device, memory, load, the model revisions each holds, last heartbeat."""
    _print(_call(url, api_key, "GET", ADMIN_NODES))


@app.command("drain")
def drain(
    node_id: NodeId,
    reason: Annotated[str, typer.Option(help="why, shown in the node list")] = "",
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Send the node no new work (its work in flight finishes); it stays drained across restarts."""
    _print([_call(url, api_key, "POST", f"{ADMIN_NODES}/{node_id}/drain", {"reason": reason})])


@app.command("undrain")
def undrain(node_id: NodeId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Route work to the node again."""
    _print([_call(url, api_key, "POST", f"{ADMIN_NODES}/{node_id}/undrain")])


@app.command("load")
def load(
    node_id: NodeId,
    engine_id: EngineId,
    revision: Annotated[int | None, typer.Option(help="default: the engine's current revision")] = None,
    wait: Annotated[float, typer.Option(help="wait up to this many seconds for the load to finish")] = 0,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Pre-warm: the node loads the engine's model revision now, before any request needs it."""
    body: dict[str, Any] = {"engineId": engine_id}
    if revision is not None:
        body["revision"] = revision
    node = _call(url, api_key, "POST", f"{ADMIN_NODES}/{node_id}/models", body, ok=202)
    deadline = time.monotonic() + wait
    while wait > 0:
        states = [m for m in node.get("models", []) if m["engineId"] == engine_id]
        if any(m["state"] == "failed" for m in states):
            _print([node])
            raise typer.Exit(1)
        if any(m["state"] == "ready" for m in states) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
        node = _call(url, api_key, "GET", f"{ADMIN_NODES}/{node_id}")
    _print([node])


@app.command("unload")
def unload(node_id: NodeId, engine_id: EngineId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Free memory: the node unloads the engine's revisions once their work in flight is done."""
    _print([_call(url, api_key, "DELETE", f"{ADMIN_NODES}/{node_id}/models/{engine_id}")])
