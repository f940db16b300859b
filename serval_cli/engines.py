"""`serval engine …`: create, list, show and delete your translation engines over REST, as any
Serval client would (`/api/v1/translation/engines`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from serval_cli.service_client import (
    DEFAULT_URL,
    ApiKey,
    JsonOutput,
    Service,
    Url,
    print_fields,
    print_json,
    print_rows,
    stated_errors,
)

app = typer.Typer(
    help="Your translation engines: create, list, show, delete (over REST).", no_args_is_help=True
)

ENGINES = "/api/v1/translation/engines"
EngineId = Annotated[str, typer.Argument(help="the engine's id")]


def create_engine(
    service: Service, source_language: str, target_language: str, engine_type: str, name: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sourceLanguage": source_language,
        "targetLanguage": target_language,
        "type": engine_type,
    }
    if name:
        body["name"] = name
    return dict(service.call("POST", ENGINES, body, ok=(201,), what="creating the engine"))


def describe(engine: dict[str, Any]) -> str:
    """`<id> "name" (en → sw, nmt)`: the whole id first, as every command prints it."""
    name = f' "{engine["name"]}"' if engine.get("name") else ""
    return f"{engine['id']}{name} ({engine['sourceLanguage']} → {engine['targetLanguage']}, {engine['type']})"


@app.command("create")
def create(
    source_language: Annotated[str, typer.Option("--source-language", "-s", help="e.g. en or eng_Latn")],
    target_language: Annotated[str, typer.Option("--target-language", "-t", help="e.g. sw or swh_Latn")],
    name: Annotated[str | None, typer.Option(help="a name to know it by")] = None,
    engine_type: Annotated[
        str, typer.Option("--type", help="nmt (fine-tunable NLLB), smt-transfer, or echo (copies the source)")
    ] = "nmt",
    json_output: JsonOutput = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Create a translation engine and print its id."""
    with stated_errors():
        engine = create_engine(Service(url, api_key), source_language, target_language, engine_type, name)
    if json_output:
        print_json(engine)
    else:
        typer.echo(f"created engine {describe(engine)}")


@app.command("list")
def list_command(json_output: JsonOutput = False, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """List your engines: id, name, languages, type, model revision, whether a build is running."""
    with stated_errors():
        engines = Service(url, api_key).call("GET", ENGINES, what="listing engines")
    if json_output:
        print_json(engines)
        return
    if not engines:
        typer.echo("you have no engines yet: `serval train` or `serval engine create` makes one")
        return
    rows = [
        [
            e["id"],
            e.get("name") or "",
            f"{e['sourceLanguage']} → {e['targetLanguage']}",
            e["type"],
            str(e["modelRevision"]),
            "building" if e.get("isBuilding") else "",
        ]
        for e in engines
    ]
    print_rows(("engine", "name", "languages", "type", "revision", "build"), rows)


@app.command("show")
def show(
    engine_id: EngineId, json_output: JsonOutput = False, url: Url = DEFAULT_URL, api_key: ApiKey = None
) -> None:
    """Show one engine."""
    with stated_errors():
        engine = Service(url, api_key).call("GET", f"{ENGINES}/{engine_id}", what=f"engine {engine_id}")
    if json_output:
        print_json(engine)
        return
    print_fields(
        [
            ("engine", engine["id"]),
            ("name", engine.get("name") or ""),
            ("languages", f"{engine['sourceLanguage']} → {engine['targetLanguage']}"),
            ("type", engine["type"]),
            ("model revision", str(engine["modelRevision"])),
            ("building", "yes" if engine.get("isBuilding") else "no"),
            ("confidence", f"{engine.get('confidence', 0):g}"),
            ("corpus size", str(engine.get("corpusSize", 0))),
            ("created", engine.get("dateCreated") or ""),
        ]
    )


@app.command("delete")
def delete(engine_id: EngineId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Delete an engine, its builds, models and pretranslations."""
    with stated_errors():
        Service(url, api_key).call("DELETE", f"{ENGINES}/{engine_id}", what=f"deleting engine {engine_id}")
    typer.echo(f"deleted engine {engine_id}")
