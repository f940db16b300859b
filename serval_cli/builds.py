"""`serval build …`: start, watch, list and cancel an engine's builds over REST, as any client would.

Following a build is `build_watch.py`'s and showing it `build_view.py`'s; this module holds the
commands, their options and exit codes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from serval_cli.build_view import duration_s, short_time
from serval_cli.build_watch import BuildWatchError, engine_path, watch_build
from serval_cli.processes import NETWORK_ERRORS, RestClient
from serval_cli.service_client import (
    DEFAULT_URL,
    ApiKey,
    Service,
    ServiceError,
    Url,
    answer_message,
    fail,
    print_rows,
    unreachable,
)

app = typer.Typer(
    help="Builds: start, watch, list and cancel an engine's builds (over REST).", no_args_is_help=True
)

EngineId = Annotated[str, typer.Argument(help="the engine's id")]

__all__ = ["DEFAULT_URL", "EXIT_CODES", "EXIT_UNWATCHABLE", "ApiKey", "Url", "app", "parse_options"]
EXIT_CODES = {"Completed": 0, "Faulted": 1, "Canceled": 2}
"""`serval build watch` (and `start --watch`) exit with the build's final state."""
EXIT_UNWATCHABLE = 3
"""The build could not be found or followed (unknown engine, service unreachable, …)."""


def _client(url: str, api_key: str | None) -> RestClient:
    return RestClient(url, api_key)


def _fail(message: str) -> typer.Exit:
    return fail(message, EXIT_UNWATCHABLE)


def _watch_and_exit(
    client: RestClient, engine_id: str, build_id: str, console: Console, *, retries: int = 5
) -> None:
    try:
        build = watch_build(client, engine_id, build_id, console, retries=retries)
    except BuildWatchError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(EXIT_CODES[build["state"]])


def parse_options(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint="--options") from None
    if not isinstance(options, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--options")
    return options


def build_config(
    name: str | None,
    options: dict[str, Any] | None,
    train_on: list[str] | None,
    no_train: bool,
    pretranslate: list[str] | None,
) -> dict[str, Any]:
    """The BuildConfig JSON. Without --train-on or --no-train, `trainOn` is omitted: the service
    then trains on all the engine's parallel corpora (none: an inference-only build)."""
    if no_train and train_on:
        raise typer.BadParameter("give --train-on or --no-train, not both")
    config: dict[str, Any] = {}
    if name is not None:
        config["name"] = name
    if no_train:
        config["trainOn"] = []
    elif train_on:
        config["trainOn"] = [{"parallelCorpusId": pc} for pc in train_on]
    if pretranslate:
        config["pretranslate"] = [{"parallelCorpusId": pc} for pc in pretranslate]
    if options is not None:
        config["options"] = options
    return config


@app.command("start")
def start(
    engine_id: EngineId,
    options: Annotated[
        str | None, typer.Option(help="build options as a JSON object, e.g. '{\"maxSteps\": 200}'")
    ] = None,
    train_on: Annotated[
        list[str] | None,
        typer.Option("--train-on", help="train on this parallel corpus (repeat for several)"),
    ] = None,
    no_train: Annotated[
        bool, typer.Option("--no-train", help="inference-only: publish the base model as it is")
    ] = False,
    pretranslate: Annotated[
        list[str] | None,
        typer.Option("--pretranslate", help="pretranslate this parallel corpus (repeat for several)"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="the build's name")] = None,
    watch: Annotated[bool, typer.Option("--watch/--no-watch", help="follow the build until it ends")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Start a build of ENGINE_ID and print its id; with --watch, follow it (exit code as `watch`)."""
    console = Console()
    config = build_config(name, parse_options(options), train_on, no_train, pretranslate)
    service = Service(url, api_key)
    try:
        payload = service.call(
            "POST", f"{engine_path(engine_id)}/builds", config, ok=(201,), what="starting the build"
        )
    except ServiceError as exc:
        raise _fail(exc.message) from None
    console.print(f"started build {payload['id']} ({payload['state']})", highlight=False)
    if watch:
        _watch_and_exit(service.rest, engine_id, payload["id"], console)


@app.command("watch")
def watch(
    engine_id: EngineId,
    build_id: Annotated[
        str | None, typer.Argument(help="the build's id (default: the current build, else the latest)")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    retries: Annotated[
        int, typer.Option(help="retries, with growing pauses, while the service is unreachable")
    ] = 5,
) -> None:
    """Follow a build with a progress bar until it ends.

    Exit code: 0 Completed, 1 Faulted, 2 Canceled, 3 when the build cannot be followed.
    """
    console = Console()
    client = _client(url, api_key)
    try:
        chosen = build_id or _current_or_latest(client, engine_id)
    except NETWORK_ERRORS:
        raise _fail(unreachable(url)) from None
    except BuildWatchError as exc:
        raise _fail(str(exc)) from None
    _watch_and_exit(client, engine_id, chosen, console, retries=retries)


def _current_or_latest(client: RestClient, engine_id: str) -> str:
    """The pending or running build; when there is none, the most recently created one."""
    code, payload = client.call("GET", f"{engine_path(engine_id)}/current-build")
    if code == 200:
        return str(payload["id"])
    if code != 204:
        raise BuildWatchError(answer_message(code, payload, "GET current-build", client.api_key))
    builds = _list(client, engine_id)
    if not builds:
        raise BuildWatchError(f"engine {engine_id} has no builds")
    return str(builds[-1]["id"])


def _list(client: RestClient, engine_id: str) -> list[dict[str, Any]]:
    code, payload = client.call("GET", f"{engine_path(engine_id)}/builds")
    if code != 200:
        raise BuildWatchError(answer_message(code, payload, "listing builds", client.api_key))
    return sorted(payload, key=lambda b: b.get("dateCreated") or "")


@app.command("list")
def list_command(engine_id: EngineId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """List ENGINE_ID's builds, oldest first."""
    try:
        builds = _list(_client(url, api_key), engine_id)
    except NETWORK_ERRORS:
        raise _fail(unreachable(url)) from None
    except BuildWatchError as exc:
        raise _fail(str(exc)) from None
    if not builds:
        typer.echo(f"engine {engine_id} has no builds")
        return
    rows = []
    for b in builds:
        progress, took = b.get("progress"), duration_s(b)
        rows.append(
            [
                b["id"],
                b.get("name") or "",
                b["state"],
                "" if progress is None else f"{progress:.0%}",
                short_time(b.get("dateCreated")),
                "" if took is None else f"{took:.0f} s",
                _first_line(b.get("message")),
            ]
        )
    print_rows(("build", "name", "state", "progress", "created", "took", "message"), rows)


def _first_line(message: str | None) -> str:
    """A fault's message can hold a traceback; the table shows its first line."""
    return (message or "").strip().partition("\n")[0]


@app.command("cancel")
def cancel(engine_id: EngineId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Cancel ENGINE_ID's pending or running build."""
    service = Service(url, api_key)
    try:
        payload = service.call(
            "POST", f"{engine_path(engine_id)}/current-build/cancel", ok=(200, 204), what="canceling"
        )
    except ServiceError as exc:
        raise _fail(exc.message) from None
    if payload is None:
        typer.echo(f"engine {engine_id} has no build pending or running")
    else:
        typer.echo(f"canceled build {payload['id']} ({payload['state']})")
