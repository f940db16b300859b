"""What the client commands (`serval engine`, `serval files`, `serval train`, `serval build`) share:
their `--url` / `--api-key` / `--json` options, one call to the API service's REST API that turns
every failure into one sentence a translator can act on (`ServiceError`), and output that never
cuts an id: a table on a terminal, tab-separated lines when piped, JSON with `--json`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from serval_cli.processes import NETWORK_ERRORS, RestClient

DEFAULT_URL = "http://127.0.0.1:8080"
API_KEY_ENV = "SERVAL_API_KEY"

Url = Annotated[str, typer.Option("--url", envvar="SERVAL_URL", help="the API service's REST base URL")]
ApiKey = Annotated[str | None, typer.Option(envvar=API_KEY_ENV, help=f"your API key (or set {API_KEY_ENV})")]
JsonOutput = Annotated[bool, typer.Option("--json", help="print the service's answer as JSON, for scripts")]

NO_KEY = (
    f"no API key: give yours with --api-key or the {API_KEY_ENV} environment variable "
    "(an administrator makes one with `serval admin api-key create`)"
)


def unreachable(where: str) -> str:
    """The one sentence every client command prints when the API service does not answer."""
    return f"cannot reach the API service at {where}: is `serval api` running?"


def refused_key(message: str) -> str:
    return f"the API service refused the API key ({message}): check --api-key or {API_KEY_ENV}"


class ServiceError(Exception):
    """A call the command cannot go on from; its message is one sentence for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def error_text(payload: Any) -> str:
    """What an error answer says: the service's `message`, else the whole payload."""
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"])
    return str(payload)


def answer_message(code: int, payload: Any, what: str, api_key: str | None) -> str:
    """An error answer as one sentence; a 401 says how to give the key, not which header."""
    if code == 401:
        return NO_KEY if not api_key else refused_key(error_text(payload))
    return f"{what} answered {code}: {error_text(payload)}"


class Service:
    """The API service's REST API for one caller: each call returns the answer's JSON or raises
    `ServiceError` with a sentence (service down, no or bad key, refused request)."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.rest = RestClient(url, api_key)

    def call(
        self, method: str, path: str, body: Any = None, *, ok: Sequence[int] = (200,), what: str = ""
    ) -> Any:
        try:
            code, payload = self.rest.call(method, path, body)
        except NETWORK_ERRORS:
            raise ServiceError(unreachable(self.url)) from None
        return self._checked(code, payload, ok, what or f"{method} {path}")

    def upload(self, path: Path, file_format: str, name: str | None = None) -> dict[str, Any]:
        """POST /api/v1/files: the file as multipart/form-data with `format` and `name`."""
        fields = {"format": file_format, "name": name or path.name}
        try:
            code, payload = self.rest.upload("/api/v1/files", fields, path.name, path.read_bytes())
        except NETWORK_ERRORS:
            raise ServiceError(unreachable(self.url)) from None
        return dict(self._checked(code, payload, (201,), f"uploading {path.name}"))

    def text(self, path: str, *, what: str) -> str | None:
        """A `text/plain` answer (pretranslated USFM); None for 204 (nothing to show)."""
        headers = {"X-API-Key": self.api_key} if self.api_key else {}
        request = urllib.request.Request(self.url + path, headers=headers)
        context = self.rest._ssl  # the same trust as the JSON calls (SERVAL_CA_FILE)
        try:
            with urllib.request.urlopen(request, timeout=60, context=context) as response:
                if response.status == 204:
                    return None
                return str(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload: Any = json.loads(raw)
            except ValueError:
                payload = raw.decode(errors="replace")
            self._checked(exc.code, payload, (200,), what)
            raise AssertionError("unreachable") from None
        except NETWORK_ERRORS:
            raise ServiceError(unreachable(self.url)) from None

    def _checked(self, code: int, payload: Any, ok: Sequence[int], what: str) -> Any:
        if code in ok:
            return payload
        raise ServiceError(answer_message(code, payload, what, self.api_key))


@contextmanager
def stated_errors(code: int = 1) -> Iterator[None]:
    """A `ServiceError` raised inside becomes its sentence on stderr and exit `code` (`fail`)."""
    try:
        yield
    except ServiceError as exc:
        raise fail(exc.message, code) from None


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: message` on stderr; raise what this returns."""
    Console(stderr=True).print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    return typer.Exit(code)


def print_json(value: Any) -> None:
    """JSON on stdout, never wrapped or coloured (scripts parse it)."""
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[str]], console: Console | None = None) -> None:
    """A table on a terminal, the first column (the id) never shortened; tab-separated lines with a
    header line when piped or captured, so `cut -f1` gives whole ids."""
    console = console or Console()
    if not console.is_terminal:
        for line in (columns, *rows):
            typer.echo("\t".join(line))
        return
    grid = Table(*columns, box=None, header_style="bold")
    widest = max((len(row[0]) for row in rows), default=0)
    grid.columns[0].no_wrap = True
    grid.columns[0].min_width = max(widest, len(columns[0]))
    for column in grid.columns[1:]:
        column.overflow = "fold"
    for row in rows:
        grid.add_row(*row)
    console.print(grid, highlight=False)


def print_fields(fields: Sequence[tuple[str, str]]) -> None:
    """`name: value` lines, plain (whole ids on any terminal width)."""
    width = max((len(name) for name, _ in fields), default=0)
    for name, value in fields:
        typer.echo(f"{name + ':':<{width + 1}} {value}")
