"""`serval admin base-model …`: make the tiny demo model, import a real NLLB-200 checkpoint, list."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from serval_cli.config import load_settings
from serval_common.names import base_model_name_problem
from serval_common.store import ModelStore, store_from_settings

app = typer.Typer(help="Base models: what fine-tunes start from and inference-only builds publish.")
console = Console(stderr=True)


def _store(home: Path | None, store_url: str | None) -> ModelStore:
    """The model store the command works on, named on stderr (as `serval admin` names its database):
    run from another folder, the default (`.serval/store` there) is another store."""
    settings = load_settings(home=home, store__url=store_url)
    store = store_from_settings(settings)
    origin = "--store-url / SERVAL_STORE__URL" if settings.store.url else f"the data folder {settings.home}"
    console.print(f"model store: {store.url} ({origin})", highlight=False, markup=False, soft_wrap=True)
    return store


def _base_model_name(name: str) -> str:
    problem = base_model_name_problem(name)
    if problem is not None:
        raise typer.BadParameter(problem)
    return name


Home = Annotated[Path | None, typer.Option(envvar="SERVAL_HOME", help="data folder for the embedded mode")]
StoreUrl = Annotated[str | None, typer.Option(help="model store URL (default: settings)")]


def make_tiny(
    store: ModelStore,
    name: str,
    *,
    source_lines: list[str],
    target_lines: list[str],
    source_code: str,
    target_code: str,
    steps: int,
) -> None:
    """Train the tiny NLLB-architecture model with a progress bar and store it as a base model."""
    from build_jobs.base_model import make_tiny_base_model
    from build_jobs.publish import publish_base_model

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[loss]}"),
        TimeRemainingColumn(),
    )
    with tempfile.TemporaryDirectory() as tmp, Progress(*columns, console=console) as progress:
        task = progress.add_task(f"training {name}", total=steps, loss="")

        def report(step: int, total: int, loss: float) -> None:
            progress.update(task, completed=step, total=total, loss=f"loss {loss:.3f}")

        ct2_dir = make_tiny_base_model(
            Path(tmp), source_lines, target_lines, source_code, target_code, steps=steps, progress=report
        )
        publish_base_model(
            store,
            name,
            ct2_dir,
            # Its tokenizer has every NLLB-200 code, but it was trained on this one pair only.
            languages=list(dict.fromkeys([source_code, target_code])),
            quantization="int8",
            hf_dir=Path(tmp) / "hf",
        )


@app.command("make-tiny")
def make_tiny_command(
    name: Annotated[str, typer.Option(help="base model name", callback=_base_model_name)] = "tiny-nllb",
    source_file: Annotated[Path | None, typer.Option(help="source text, one segment a line")] = None,
    target_file: Annotated[
        Path | None, typer.Option(help="target text, line-aligned with the source")
    ] = None,
    source_lang: Annotated[str, typer.Option(help="source NLLB code")] = "eng_Latn",
    target_lang: Annotated[str, typer.Option(help="target NLLB code")] = "swh_Latn",
    steps: Annotated[int, typer.Option(help="training steps")] = 1000,
    home: Home = None,
    store_url: StoreUrl = None,
) -> None:
    """Build a ~1M-parameter NLLB-architecture model, train it briefly, store it as a base model.

    Without --source-file/--target-file it trains on the bundled English–Swahili verses.
    """
    from serval_cli.corpus import demo_pairs

    if (source_file is None) != (target_file is None):
        raise typer.BadParameter("give both --source-file and --target-file, or neither")
    if source_file is not None and target_file is not None:
        sources = source_file.read_text(encoding="utf-8").splitlines()
        targets = target_file.read_text(encoding="utf-8").splitlines()
        if len(sources) != len(targets):
            raise typer.BadParameter(
                f"{source_file} has {len(sources)} lines but {target_file} has {len(targets)}"
            )
    else:
        pairs = demo_pairs()
        sources, targets = [p.source for p in pairs], [p.target for p in pairs]
    store = _store(home, store_url)
    make_tiny(
        store,
        name,
        source_lines=sources,
        target_lines=targets,
        source_code=source_lang,
        target_code=target_lang,
        steps=steps,
    )
    console.print(f"stored base model [bold]{name}[/] in {store.url}")


@app.command("import")
def import_command(
    hf_dir: Annotated[Path, typer.Argument(help="a Hugging Face NLLB-200 checkpoint folder")],
    name: Annotated[str, typer.Option(help="base model name", callback=_base_model_name)],
    quantization: Annotated[str, typer.Option(help="CTranslate2 quantization")] = "int8",
    learning_rate: Annotated[
        float | None,
        typer.Option(
            help="the learningRate of fine-tunes from this model when a build sets none "
            "(unset: the deployment's jobs.learning_rate, else 0.0001)"
        ),
    ] = None,
    home: Home = None,
    store_url: StoreUrl = None,
) -> None:
    """Check a real NLLB-200 checkpoint, convert it to CTranslate2 and store it as a base model.

    Nothing is stored unless the folder has everything builds and nodes need: config.json of an
    NLLB (M2M100) model, its weights, and a tokenizer in NLLB's layout that knows at least one
    FLORES-200 language code. The base model lists the languages its tokenizer knows.
    """
    from build_jobs.base_model import CheckpointRefused, import_checkpoint
    from build_jobs.publish import publish_base_model
    from serval_common.build_options import BuildOptionsError, TrainingDefaults
    from serval_common.languages import describe_languages

    try:
        defaults = TrainingDefaults.checked(learning_rate=learning_rate)
    except BuildOptionsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--learning-rate") from None
    hf_dir = hf_dir.expanduser()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with console.status(f"checking and converting {hf_dir}"):
                imported = import_checkpoint(hf_dir, Path(tmp), quantization=quantization)
        except CheckpointRefused as exc:
            console.print(f"[red]not imported:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        if imported.derived_sentencepiece:
            console.print(
                "derived sentencepiece.bpe.model from tokenizer.json (it splits text as the tokenizer does)"
            )
        store = _store(home, store_url)
        publish_base_model(
            store,
            name,
            imported.ct2_dir,
            languages=imported.languages,
            quantization=quantization,
            hf_dir=imported.hf_dir,
            training_defaults=defaults if defaults.given() else None,
        )
    console.print(
        f"stored base model [bold]{name}[/] in {store.url}; it knows {describe_languages(imported.languages)}",
        highlight=False,
    )


@app.command("list")
def list_command(home: Home = None, store_url: StoreUrl = None) -> None:
    """List the base models in the model store."""
    from serval_common.languages import describe_languages
    from serval_common.manifest import read_manifest

    store = _store(home, store_url)
    names = sorted(
        {
            key.split("/")[1]
            for key in store.list_keys("base-models")
            if key.endswith("/manifest.json") and base_model_name_problem(key.split("/")[1]) is None
        }
    )
    if not names:
        console.print(
            "no base models in this store: `serval admin base-model import` or `make-tiny` stores one",
            highlight=False,
            markup=False,
        )
    for name in names:
        manifest = read_manifest(store, f"base-models/{name}")
        typer.echo(
            f"{name}\t{manifest.size_bytes} bytes\t{manifest.quantization}\t{manifest.created_at:%Y-%m-%d}"
            f"\t{describe_languages(manifest.languages, shown=len(manifest.languages))}"
        )
