"""Following a build over REST until it ends: `watch_build` (`serval build watch` and the demo
use it) long-polls `GET …/builds/{id}?min-revision=N` with N one past the last revision seen, so it
wakes on every change; a 408 (nothing changed within the service's long-poll window) just polls
again, and network failures are retried a bounded number of times with a growing pause.

It stands apart from the commands (`builds.py`) so that other code (the demo, the benchmarks)
can follow a build without the command line; how each change is shown is `build_view.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from serval_cli.build_view import BuildView, summary
from serval_cli.processes import NETWORK_ERRORS, RestClient
from serval_cli.service_client import answer_message, error_text

__all__ = ["BuildWatchError", "engine_path", "error_text", "watch_build"]

FINISHED_STATES = ("Completed", "Faulted", "Canceled")

POLL_TIMEOUT_S = 60.0
"""Client-side timeout of one long poll; the service answers 408 after at most 40 s."""

UpdateHandler = Callable[[dict[str, Any]], None]


class BuildWatchError(RuntimeError):
    """The build could not be read: an unexpected HTTP answer, or the service stayed unreachable."""


def engine_path(engine_id: str) -> str:
    """The engine's REST path, under which its builds are."""
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
    view = BuildView(console, build)
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
            raise _answer_error(client, path, code, payload)


def _get_with_retries(client: RestClient, path: str, retries: int, backoff_s: float) -> dict[str, Any]:
    code, payload = _call_with_retries(client, path, retries, backoff_s)
    if code != 200:
        raise _answer_error(client, path, code, payload)
    return dict(payload)


def _answer_error(client: RestClient, path: str, code: int, payload: Any) -> BuildWatchError:
    """An answer the watch cannot go on from, as one sentence."""
    return BuildWatchError(answer_message(code, payload, f"GET {path}", client.api_key))


def _call_with_retries(client: RestClient, path: str, retries: int, backoff_s: float) -> tuple[int, Any]:
    """GET `path`; a network failure is retried up to `retries` times, pausing longer each time."""
    for attempt in range(retries + 1):
        try:
            return client.call("GET", path, timeout_s=POLL_TIMEOUT_S)
        except NETWORK_ERRORS as exc:
            if attempt == retries:
                raise BuildWatchError(
                    f"cannot reach the API service at {client.base_url} (unreachable after "
                    f"{retries + 1} attempts): is `serval api` running?"
                ) from exc
            time.sleep(min(backoff_s * 2**attempt, 10.0))
    raise AssertionError("unreachable")
