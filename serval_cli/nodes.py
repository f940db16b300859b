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
from rich.text import Text

from serval_cli.builds import DEFAULT_URL, ApiKey, Url
from serval_cli.processes import NETWORK_ERRORS, RestClient
from serval_cli.service_client import JsonOutput, answer_message, print_json, print_rows, unreachable

app = typer.Typer(
    help="Inference nodes: list, drain, undrain, load, unload (over REST, with an admin key).",
    no_args_is_help=True,
)

NodeId = Annotated[str, typer.Argument(help="the node's id, as `serval admin nodes list` shows it")]
EngineId = Annotated[str, typer.Argument(help="the engine's id")]
ADMIN_NODES = "/api/v1/admin/nodes"
errors = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
NO_ADMIN_KEY = (
    "no API key: give an administrator's key (one with the admin scope) with --api-key or SERVAL_API_KEY; "
    "`serval admin api-key create --owner <you> --scope admin` makes one on the server"
)


def _call(url: str, api_key: str | None, method: str, path: str, body: Any = None, ok: int = 200) -> Any:
    """The answer's JSON; anything else ends the command with one sentence (exit 1)."""
    try:
        code, payload = RestClient(url, api_key).call(method, path, body)
    except NETWORK_ERRORS:
        errors.print(Text(unreachable(url), style="red"))
        raise typer.Exit(1) from None
    if code != ok:
        message = (
            NO_ADMIN_KEY
            if code == 401 and not api_key
            else answer_message(code, payload, f"{method} {path}", api_key)
        )
        errors.print(Text(message, style="red"))
        raise typer.Exit(1)
    return payload


def _service(url: str) -> None:
    """Which API service the command talks to (on stderr, so scripts read only the answer)."""
    errors.print(f"API service: {url.rstrip('/')}")


def _size(count: int) -> str:
    if not count:
        return ""
    return f"{count / (1 << 30):.1f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.0f} MiB"


def _revision(model: dict[str, Any]) -> str:
    """A revision a node holds, by engine name and id (or the base model it serves as it is)."""
    if not model.get("engineId"):
        return f"base model {model.get('baseModel') or '?'}"
    name = model.get("engineName")
    return (
        f"{name} ({model['engineId']}/{model['revision']})"
        if name
        else f"{model['engineId']}/{model['revision']}"
    )


def _models(node: dict[str, Any], separator: str) -> str:
    """One entry per loaded model (a set of weights, with its size) with the revisions it serves."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for model in node.get("models", []):
        groups.setdefault(model.get("weights") or f"{model['engineId']}/{model['revision']}", []).append(
            model
        )
    held = []
    for revisions in groups.values():
        size = max(revision.get("sizeBytes", 0) for revision in revisions)
        served = [
            f"{_revision(m)} {m['state']}" + (f" ({m['message']})" if m.get("message") else "")
            for m in revisions
        ]
        held.append(("one model" + (f", {_size(size)}" if size else "") + ": ") + ", ".join(served))
    return separator.join(held)


def _print(nodes: list[dict[str, Any]], as_json: bool = False) -> None:
    if as_json:
        print_json(nodes)
        return
    separator = "\n" if Console().is_terminal else "; "
    rows = []
    for node in nodes:
        status = node["status"] + (f" ({node['drainReason']})" if node.get("drained") else "")
        load = f"{node['inFlight']}/{node['slots']}" if node.get("slots") else ""
        memory = f"{_size(node.get('memoryFreeBytes', 0))} / {_size(node.get('memoryTotalBytes', 0))}"
        rows.append(
            (
                node["id"],
                status,
                node.get("device", ""),
                memory if node.get("slots") else "",
                load,
                _models(node, separator),
                node["lastSeen"][:19].replace("T", " "),
            )
        )
    print_rows(("node", "status", "device", "memory free/total", "load", "models", "last heartbeat"), rows)


@app.command("list")
def list_nodes(as_json: JsonOutput = False, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """List nodes: status, device, memory, load, the model revisions each holds (by engine name
    and id), last heartbeat."""
    _service(url)
    _print(_call(url, api_key, "GET", ADMIN_NODES), as_json)


@app.command("drain")
def drain(
    node_id: NodeId,
    reason: Annotated[str, typer.Option(help="why, shown in the node list")] = "",
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Send the node no new work (its work in flight finishes); it stays drained across restarts."""
    _service(url)
    _print([_call(url, api_key, "POST", f"{ADMIN_NODES}/{node_id}/drain", {"reason": reason})])


@app.command("undrain")
def undrain(node_id: NodeId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Route work to the node again."""
    _service(url)
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
    _service(url)
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
    _service(url)
    _print([_call(url, api_key, "DELETE", f"{ADMIN_NODES}/{node_id}/models/{engine_id}")])
