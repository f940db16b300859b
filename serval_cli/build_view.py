"""How `serval build` shows a build: a rich progress bar on a terminal, one printed line per
change elsewhere (logs, pipes), the one-line summary once it ends, and the durations and times
`serval build list` tabulates.

It stands apart from following a build over REST (`build_watch.py`) and from the commands
(`builds.py`): it only turns a build's JSON into text.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)


def summary(build: dict[str, Any], watched_s: float) -> str:
    """One line: state, the message's first line and elapsed time (the build's own duration when
    known). A job's fault message can hold a traceback; `watch_build` prints the rest below."""
    elapsed = duration_s(build)
    seconds = watched_s if elapsed is None else elapsed
    first = _first_line(build.get("message"))
    return f"build {build['id']} {build['state']}" + (f": {first}" if first else "") + f" ({seconds:.1f} s)"


def _first_line(message: str | None) -> str:
    return (message or "").strip().partition("\n")[0].strip()


def duration_s(build: dict[str, Any]) -> float | None:
    """How long the build took, created to finished; None while it runs."""
    created, finished = build.get("dateCreated"), build.get("dateFinished")
    if not created or not finished:
        return None
    return (_timestamp(finished) - _timestamp(created)).total_seconds()


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def describe(build: dict[str, Any]) -> str:
    """The state, the message and, while queued, how many builds are ahead."""
    parts = [build["state"]]
    if message := _first_line(build.get("message")):
        parts.append(message)
    ahead = build.get("queueDepth")
    if build["state"] == "Pending" and ahead is not None:
        parts.append("next in the job queue" if ahead == 0 else f"{ahead} ahead in the job queue")
    return " · ".join(parts)


class BuildView:
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


def short_time(text: str | None) -> str:
    """A timestamp to the minute, as `serval build list` shows it."""
    return "" if not text else _timestamp(text).strftime("%Y-%m-%d %H:%M")
