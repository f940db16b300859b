"""`serval build …`: start, watch, list and cancel an engine's builds over REST, as any client would.

`watch_build` is the watch loop on its own (the demo uses it too): it long-polls
`GET …/builds/{id}?min-revision=N` with N one past the last revision seen, so it wakes on every
change; a 408 (nothing changed within the service's long-poll window) just polls again, and
network failures are retried a bounded number of times with a growing pause.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from serval_cli.processes import NETWORK_ERRORS, RestClient

app = typer.Typer(
    help="Builds: start, watch, list and cancel an engine's builds (over REST).", no_args_is_help=True
)

Url = Annotated[str, typer.Option("--url", envvar="SERVAL_URL", help="API service REST base URL")]
ApiKey = Annotated[str | None, typer.Option(envvar="SERVAL_API_KEY", help="API key")]
EngineId = Annotated[str, typer.Argument(help="the engine's id")]

DEFAULT_URL = "http://127.0.0.1:8080"
FINISHED_STATES = ("Completed", "Faulted", "Canceled")
EXIT_CODES = {"Completed": 0, "Faulted": 1, "Canceled": 2}
"""`serval build watch` (and `start --watch`) exit with the build's final state."""
EXIT_UNWATCHABLE = 3
"""The build could not be found or followed (unknown engine, service unreachable, …)."""

POLL_TIMEOUT_S = 60.0
"""Client-side timeout of one long poll; the service answers 408 after at most 40 s."""

UpdateHandler = Callable[[dict[str, Any]], None]


class BuildWatchError(RuntimeError):
    """The build could not be read: an unexpected HTTP answer, or the service stayed unreachable."""


READ_ERRORS: tuple[type[Exception], ...] = (BuildWatchError, *NETWORK_ERRORS)


def engine_path(engine_id: str) -> str:
    return f"/api/v1/translation/engines/{engine_id}"


def watch_build(
    client: RestClient,
    engine_id: str,
    build_id: str,
    console: Console,
    *,
    on_update: UpdateHandler | None = None,
    retries: int = 5,
    backoff_s: float = 0.5,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Follow the build until it finishes and return its final JSON.

    On a terminal `console` it shows a progress bar; otherwise it prints one line per change.
    `on_update` sees every version of the build it receives (the first one included). After
    `retries` consecutive network failures, or past `timeout_s`, it raises `BuildWatchError`.
    """
    path = f"{engine_path(engine_id)}/builds/{build_id}"
    started = time.monotonic()
    build = _get_with_retries(client, path, retries, backoff_s)
    view = _View(console, build)
    try:
        while True:
            view.show(build)
            if on_update is not None:
                on_update(build)
            if build["state"] in FINISHED_STATES:
                break
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise BuildWatchError(f"build {build_id} still {build['state']} after {timeout_s:g} s")
            build = _next_revision(client, path, build, retries, backoff_s)
    finally:
        view.stop()
    console.print(summary(build, time.monotonic() - started), highlight=False, soft_wrap=True)
    rest = (build.get("message") or "").strip().partition("\n")[2]
    if rest and build["state"] == "Faulted":
        console.print(rest, highlight=False, markup=False, soft_wrap=True)
    return build


def summary(build: dict[str, Any], watched_s: float) -> str:
    """One line: state, the message's first line and elapsed time (the build's own duration when
    known). A job's fault message can hold a traceback; `watch_build` prints the rest below."""
    elapsed = _duration_s(build)
    seconds = watched_s if elapsed is None else elapsed
    first = _first_line(build.get("message"))
    return f"build {build['id']} {build['state']}" + (f": {first}" if first else "") + f" ({seconds:.1f} s)"


def _first_line(message: str | None) -> str:
    return (message or "").strip().partition("\n")[0].strip()


def _duration_s(build: dict[str, Any]) -> float | None:
    created, finished = build.get("dateCreated"), build.get("dateFinished")
    if not created or not finished:
        return None
    return (_timestamp(finished) - _timestamp(created)).total_seconds()


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _next_revision(
    client: RestClient, path: str, build: dict[str, Any], retries: int, backoff_s: float
) -> dict[str, Any]:
    """The build's next version: long-polls until a revision past the one in hand exists."""
    poll = f"{path}?min-revision={build['revision'] + 1}"
    while True:
        code, payload = _call_with_retries(client, poll, retries, backoff_s)
        if code == 200:
            return dict(payload)
        if code != 408:
            raise BuildWatchError(f"GET {path} answered {code}: {_error_text(payload)}")


def _get_with_retries(client: RestClient, path: str, retries: int, backoff_s: float) -> dict[str, Any]:
    code, payload = _call_with_retries(client, path, retries, backoff_s)
    if code != 200:
        raise BuildWatchError(f"GET {path} answered {code}: {_error_text(payload)}")
    return dict(payload)


def _call_with_retries(client: RestClient, path: str, retries: int, backoff_s: float) -> tuple[int, Any]:
    """GET `path`; a network failure is retried up to `retries` times, pausing longer each time."""
    for attempt in range(retries + 1):
        try:
            return client.call("GET", path, timeout_s=POLL_TIMEOUT_S)
        except NETWORK_ERRORS as exc:
            if attempt == retries:
                raise BuildWatchError(
                    f"{client.base_url} unreachable after {retries + 1} attempts: {exc}"
                ) from exc
            time.sleep(min(backoff_s * 2**attempt, 10.0))
    raise AssertionError("unreachable")


def _error_text(payload: Any) -> str:
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"])
    return str(payload)


def describe(build: dict[str, Any]) -> str:
    """The state, the message and, while queued, how many builds are ahead."""
    parts = [build["state"]]
    if message := _first_line(build.get("message")):
        parts.append(message)
    ahead = build.get("queueDepth")
    if build["state"] == "Pending" and ahead is not None:
        parts.append("next in the job queue" if ahead == 0 else f"{ahead} ahead in the job queue")
    return " · ".join(parts)


class _View:
    """A rich progress bar on a terminal; one printed line per change elsewhere (logs, pipes)."""

    def __init__(self, console: Console, build: dict[str, Any]) -> None:
        self.console = console
        self.bar = console.is_terminal
        self.started = time.monotonic()
        self.last_line = ""
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[build_id]}[/]"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            disable=not self.bar,
        )
        self.task = self.progress.add_task("", total=1.0, build_id=build["id"])
        if self.bar:
            self.progress.start()

    def show(self, build: dict[str, Any]) -> None:
        progress = build.get("progress")
        description = describe(build)
        if self.bar:
            completed = 1.0 if build["state"] == "Completed" else progress
            self.progress.update(self.task, description=description, completed=completed or 0.0)
            return
        line = f"{build['state']:<9} " + (f"{progress:4.0%} " if progress is not None else "   - ")
        line += description.partition(" · ")[2]
        if line != self.last_line:
            elapsed = time.monotonic() - self.started
            self.console.print(f"{elapsed:6.1f}s {line}", highlight=False, markup=False, soft_wrap=True)
            self.last_line = line

    def stop(self) -> None:
        if self.bar:
            self.progress.stop()


def _client(url: str, api_key: str | None) -> RestClient:
    return RestClient(url, api_key)


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(EXIT_UNWATCHABLE)


def _watch_and_exit(
    client: RestClient, engine_id: str, build_id: str, console: Console, *, retries: int = 5
) -> None:
    try:
        build = watch_build(client, engine_id, build_id, console, retries=retries)
    except BuildWatchError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(EXIT_CODES[build["state"]])


def _parse_options(text: str | None) -> dict[str, Any] | None:
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
    config = build_config(name, _parse_options(options), train_on, no_train, pretranslate)
    client = _client(url, api_key)
    try:
        code, payload = client.call("POST", f"{engine_path(engine_id)}/builds", config)
    except NETWORK_ERRORS as exc:
        raise _fail(f"{url} unreachable: {exc}") from None
    if code != 201:
        raise _fail(f"starting the build answered {code}: {_error_text(payload)}")
    console.print(f"started build {payload['id']} ({payload['state']})", highlight=False)
    if watch:
        _watch_and_exit(client, engine_id, payload["id"], console)


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
    except READ_ERRORS as exc:
        raise _fail(str(exc)) from None
    _watch_and_exit(client, engine_id, chosen, console, retries=retries)


def _current_or_latest(client: RestClient, engine_id: str) -> str:
    """The pending or running build; when there is none, the most recently created one."""
    code, payload = client.call("GET", f"{engine_path(engine_id)}/current-build")
    if code == 200:
        return str(payload["id"])
    if code != 204:
        raise BuildWatchError(f"GET current-build answered {code}: {_error_text(payload)}")
    builds = _list(client, engine_id)
    if not builds:
        raise BuildWatchError(f"engine {engine_id} has no builds")
    return str(builds[-1]["id"])


def _list(client: RestClient, engine_id: str) -> list[dict[str, Any]]:
    code, payload = client.call("GET", f"{engine_path(engine_id)}/builds")
    if code != 200:
        raise BuildWatchError(f"listing builds answered {code}: {_error_text(payload)}")
    return sorted(payload, key=lambda b: b.get("dateCreated") or "")


@app.command("list")
def list_command(engine_id: EngineId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """List ENGINE_ID's builds, oldest first."""
    console = Console()
    try:
        builds = _list(_client(url, api_key), engine_id)
    except READ_ERRORS as exc:
        raise _fail(str(exc)) from None
    if not builds:
        console.print(f"engine {engine_id} has no builds")
        return
    grid = Table("build", "name", "state", "progress", "created", "took", "message", box=None)
    for column in grid.columns[:6]:
        column.no_wrap = True
    for b in builds:
        progress, took = b.get("progress"), _duration_s(b)
        grid.add_row(
            b["id"],
            b.get("name") or "",
            b["state"],
            "" if progress is None else f"{progress:.0%}",
            _short_time(b.get("dateCreated")),
            "" if took is None else f"{took:.0f} s",
            b.get("message") or "",
        )
    console.print(grid)


def _short_time(text: str | None) -> str:
    return "" if not text else _timestamp(text).strftime("%Y-%m-%d %H:%M")


@app.command("cancel")
def cancel(engine_id: EngineId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Cancel ENGINE_ID's pending or running build."""
    console = Console()
    try:
        code, payload = _client(url, api_key).call("POST", f"{engine_path(engine_id)}/current-build/cancel")
    except NETWORK_ERRORS as exc:
        raise _fail(f"{url} unreachable: {exc}") from None
    if code == 204:
        console.print(f"engine {engine_id} has no build pending or running")
    elif code == 200:
        console.print(f"canceled build {payload['id']} ({payload['state']})", highlight=False)
    else:
        raise _fail(f"canceling answered {code}: {_error_text(payload)}")
