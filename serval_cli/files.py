"""`serval files …`: upload, list and delete your data files over REST (`/api/v1/files`). A file is
plain text (`Text`: one segment, e.g. one verse, per line) or a Paratext project's backup zip
(`Paratext`); `upload` tells them apart by their contents."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Annotated, Any

import typer

from serval_cli.service_client import (
    DEFAULT_URL,
    ApiKey,
    JsonOutput,
    Service,
    ServiceError,
    Url,
    fail,
    print_json,
    print_rows,
    stated_errors,
)

app = typer.Typer(help="Your data files: upload, list, delete (over REST).", no_args_is_help=True)

FILES = "/api/v1/files"
TEXT, PARATEXT = "Text", "Paratext"


class UnreadableFile(ValueError):
    """A file that is neither UTF-8 text nor a zip; the message says so in one sentence."""


def detect_format(path: Path) -> str:
    """`Paratext` for a zip (a Paratext project's backup), `Text` for UTF-8 text."""
    if not path.is_file():
        raise UnreadableFile(f"{path} is not a file")
    if zipfile.is_zipfile(path):
        return PARATEXT
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UnreadableFile(
            f"{path} is neither UTF-8 text (one segment a line) nor a Paratext project zip"
        ) from None
    return TEXT


def upload_file(service: Service, path: Path, file_format: str | None, name: str | None) -> dict[str, Any]:
    return service.upload(path, file_format or detect_format(path), name)


@app.command("upload")
def upload(
    path: Annotated[Path, typer.Argument(help="a text file (one segment a line) or a Paratext project zip")],
    file_format: Annotated[
        str | None,
        typer.Option("--format", help="Text or Paratext (default: a zip is Paratext, anything else Text)"),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="the file's name on the service (default: its own)")
    ] = None,
    json_output: JsonOutput = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Upload a data file and print its id."""
    try:
        file = upload_file(Service(url, api_key), path, file_format, name)
    except UnreadableFile as exc:
        raise fail(str(exc)) from None
    except ServiceError as exc:
        raise fail(exc.message) from None
    if json_output:
        print_json(file)
    else:
        typer.echo(f"uploaded {path.name} as file {file['id']} ({file['format']})")


@app.command("list")
def list_command(json_output: JsonOutput = False, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """List your data files: id, name, format, revision."""
    with stated_errors():
        files = Service(url, api_key).call("GET", FILES, what="listing files")
    if json_output:
        print_json(files)
        return
    if not files:
        typer.echo("you have no files yet: `serval files upload` or `serval train` uploads some")
        return
    rows = [[f["id"], f.get("name") or "", f["format"], str(f["revision"])] for f in files]
    print_rows(("file", "name", "format", "revision"), rows)


@app.command("delete")
def delete(
    file_id: Annotated[str, typer.Argument(help="the file's id")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Delete a data file."""
    with stated_errors():
        Service(url, api_key).call("DELETE", f"{FILES}/{file_id}", what=f"deleting file {file_id}")
    typer.echo(f"deleted file {file_id}")
