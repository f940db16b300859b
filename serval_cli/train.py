"""`serval train SOURCE TARGET`: a team's own texts to a fine-tuned engine and its drafts, in one
command, over the REST API as any Serval client would.

It creates the engine (or uses `--engine`), uploads both files (`Text`: one segment a line, paired
by line number; `Paratext`: a project's backup zip, paired by verse), makes a corpus of each, joins
them in a parallel corpus of the engine, starts a build that trains on it and pretranslates the
source segments the target lacks, follows the build with `serval build watch`'s progress view, and
saves the drafts as JSON (`--drafts`) and, for Paratext projects, as USFM (`--usfm`).

Exit codes are `serval build watch`'s: 0 Completed, 1 Faulted, 2 Canceled, 3 when nothing could be
started or followed (the service is down, a key or request is refused).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from serval_cli.build_watch import BuildWatchError, engine_path, watch_build
from serval_cli.builds import EXIT_CODES, EXIT_UNWATCHABLE, parse_options
from serval_cli.engines import create_engine, describe
from serval_cli.files import PARATEXT, UnreadableFile, detect_format
from serval_cli.service_client import DEFAULT_URL, ApiKey, Service, ServiceError, Url, fail

EXIT_INTERRUPTED = 130


def train(
    source: Annotated[
        Path,
        typer.Argument(
            help="the source text: a text file (one verse or segment a line) or a Paratext project zip"
        ),
    ],
    target: Annotated[
        Path,
        typer.Argument(
            help="the target text, in the same form: what is translated so far (line N pairs with line N)"
        ),
    ],
    source_language: Annotated[
        str | None,
        typer.Option("--source-language", "-s", help="e.g. en or eng_Latn (default: the engine's)"),
    ] = None,
    target_language: Annotated[
        str | None,
        typer.Option("--target-language", "-t", help="e.g. sw or swh_Latn (default: the engine's)"),
    ] = None,
    engine_id: Annotated[
        str | None, typer.Option("--engine", help="train this existing engine instead of creating one")
    ] = None,
    name: Annotated[str | None, typer.Option(help="the new engine's name (default: SOURCE → TARGET)")] = None,
    engine_type: Annotated[
        str,
        typer.Option(
            "--type", help="the new engine's type: nmt, or echo for a dry run that copies the source"
        ),
    ] = "nmt",
    options: Annotated[
        str | None, typer.Option(help="build options as a JSON object, e.g. '{\"maxSteps\": 2000}'")
    ] = None,
    drafts: Annotated[
        Path | None, typer.Option("--drafts", help="save the drafts (pretranslations) as JSON to this file")
    ] = None,
    usfm: Annotated[
        Path | None,
        typer.Option(
            "--usfm",
            help="save the drafts as USFM to this file (Paratext projects only; with several books, "
            "one file per book: NAME-MAT.usfm, …)",
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Fine-tune an engine on SOURCE and TARGET and draft what TARGET lacks.

    Creates the engine, uploads the two files, starts a build that trains on them and
    pretranslates the source verses (or lines) the target has no text for, shows its progress,
    and saves the drafts. Exit code: 0 Completed, 1 Faulted, 2 Canceled, 3 when nothing could be
    started or followed.
    """
    console = Console(highlight=False, soft_wrap=True, markup=False)
    build_options = parse_options(options)
    formats = _formats(source, target)
    if usfm is not None and PARATEXT not in formats:
        raise typer.BadParameter(
            "USFM drafts need a Paratext project zip as the source or target", param_hint="--usfm"
        )
    service = Service(url, api_key)
    try:
        engine = _engine(
            service,
            engine_id,
            source_language,
            target_language,
            engine_type,
            name or f"{source.name} → {target.name}",
        )
        console.print(f"{'using' if engine_id else 'created'} engine {describe(engine)}")
        pc_id = _parallel_corpus(service, engine, (source, target), formats, console)
        config: dict[str, Any] = {
            "name": f"serval train {source.name} {target.name}",
            "trainOn": [{"parallelCorpusId": pc_id}],
            "pretranslate": [{"parallelCorpusId": pc_id}],
        }
        if build_options is not None:
            config["options"] = build_options
        build = service.call(
            "POST", f"{engine_path(engine['id'])}/builds", config, ok=(201,), what="starting the build"
        )
    except ServiceError as exc:
        raise fail(exc.message, EXIT_UNWATCHABLE) from None
    console.print(f"started build {build['id']}")
    try:
        build = watch_build(service.rest, engine["id"], build["id"], console)
    except BuildWatchError as exc:
        raise fail(str(exc), EXIT_UNWATCHABLE) from None
    except KeyboardInterrupt:
        console.print(
            f"stopped watching; the build goes on: `serval build watch {engine['id']} {build['id']}` follows it"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if build["state"] != "Completed":
        raise typer.Exit(EXIT_CODES[build["state"]])
    try:
        _save_drafts(service, engine["id"], pc_id, drafts, usfm, console)
    except (ServiceError, OSError) as exc:
        raise fail(exc.message if isinstance(exc, ServiceError) else str(exc), EXIT_UNWATCHABLE) from None
    console.print(f'translate with it: serval translate {engine["id"]} "…" (or from the playground)')
    console.print(
        "for SIL Converters or LibreTranslate tools, an administrator makes a key bound to it: "
        f"serval admin api-key create --owner OWNER --engine {engine['id']} --scope read:translation_engines"
    )


def _formats(source: Path, target: Path) -> tuple[str, str]:
    try:
        formats = detect_format(source), detect_format(target)
    except UnreadableFile as exc:
        raise typer.BadParameter(str(exc)) from None
    if formats[0] != formats[1]:
        raise typer.BadParameter(
            f"give two text files or two Paratext project zips ({source.name} is {formats[0]}, "
            f"{target.name} is {formats[1]})"
        )
    return formats


def _engine(
    service: Service,
    engine_id: str | None,
    source_language: str | None,
    target_language: str | None,
    engine_type: str,
    name: str,
) -> dict[str, Any]:
    if engine_id is None:
        if not source_language or not target_language:
            raise typer.BadParameter("give --source-language and --target-language (or --engine)")
        return create_engine(service, source_language, target_language, engine_type, name)
    engine = dict(service.call("GET", engine_path(engine_id), what=f"engine {engine_id}"))
    for given, side in ((source_language, "source"), (target_language, "target")):
        if given and given != engine[f"{side}Language"]:
            raise ServiceError(
                f"engine {engine_id} translates {engine['sourceLanguage']} → {engine['targetLanguage']}, "
                f"not {source_language or engine['sourceLanguage']} → {target_language or engine['targetLanguage']}"
            )
    return engine


def _parallel_corpus(
    service: Service,
    engine: dict[str, Any],
    paths: tuple[Path, Path],
    formats: tuple[str, str],
    console: Console,
) -> str:
    """Upload both files, make a corpus of each and the engine's parallel corpus of the two. Text
    files share one text id (the source's name up to its first dot) so that their lines pair."""
    text_id = paths[0].name.split(".")[0] or "text"
    corpora = []
    for path, file_format, side in zip(paths, formats, ("source", "target"), strict=True):
        file = service.upload(path, file_format)
        console.print(f"uploaded {path.name} as file {file['id']} ({file_format})")
        reference: dict[str, Any] = {"fileId": file["id"]}
        if file_format != PARATEXT:
            reference["textId"] = text_id
        body = {"name": f"{path.name} ({side})", "language": engine[f"{side}Language"], "files": [reference]}
        corpora.append(
            service.call("POST", "/api/v1/corpora", body, ok=(201,), what=f"making the {side} corpus")
        )
    body = {
        "name": f"{paths[0].name} → {paths[1].name}",
        "sourceCorpusIds": [corpora[0]["id"]],
        "targetCorpusIds": [corpora[1]["id"]],
    }
    parallel = service.call(
        "POST",
        f"{engine_path(engine['id'])}/parallel-corpora",
        body,
        ok=(201,),
        what="making the parallel corpus",
    )
    console.print(
        f"parallel corpus {parallel['id']} (source corpus {corpora[0]['id']}, target corpus {corpora[1]['id']})"
    )
    return str(parallel["id"])


def _save_drafts(
    service: Service, engine_id: str, pc_id: str, drafts: Path | None, usfm: Path | None, console: Console
) -> None:
    path = f"{engine_path(engine_id)}/parallel-corpora/{pc_id}/pretranslations"
    rows: list[dict[str, Any]] = service.call("GET", path, what="reading the drafts")
    console.print(f"{len(rows)} drafts (pretranslations) at {service.url}{path}")
    if not rows:
        console.print(
            "no drafts: the target has text for every source segment (drafts are made for the "
            "source lines or verses the target lacks)"
        )
    if drafts is not None:
        drafts.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"saved the drafts as JSON to {drafts}")
    if usfm is None:
        return
    books = list(dict.fromkeys(row["textId"] for row in rows))
    saved = 0
    for book in books:
        text = service.text(f"{path}/{book}/usfm", what=f"reading {book} as USFM")
        if text is None:
            continue
        out = usfm if len(books) == 1 else usfm.with_name(f"{usfm.stem}-{book}{usfm.suffix or '.usfm'}")
        out.write_text(text, encoding="utf-8")
        console.print(f"saved {book} as USFM to {out}")
        saved += 1
    if not saved:
        console.print("no USFM: no drafted book is in the source or target project")
