"""`python -m build_jobs run …` (also `serval job run …`)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from serval_common.logs import configure_logging
from serval_common.settings import Settings

app = typer.Typer(
    help="Build jobs: fine-tune or publish a model revision for one build.", no_args_is_help=True
)


@app.callback()
def main() -> None:
    """Run build jobs."""


@app.command()
def run(
    build_id: Annotated[str, typer.Option(help="the build's id")],
    engine_id: Annotated[str, typer.Option(help="the engine's id")],
    source_language: Annotated[str, typer.Option(help="source NLLB code, e.g. eng_Latn")],
    target_language: Annotated[str, typer.Option(help="target NLLB code, e.g. swh_Latn")],
    revision: Annotated[int, typer.Option(help="model revision to publish")],
    api_address: Annotated[str, typer.Option(help="API service gRPC address host:port")],
    store_url: Annotated[str | None, typer.Option(help="model store URL (default: settings)")] = None,
    train: Annotated[bool, typer.Option(help="fine-tune; --no-train publishes the base model")] = True,
    options: Annotated[str, typer.Option(help="build options as a JSON object")] = "{}",
    engine_type: Annotated[
        str, typer.Option(help="the engine's family: nmt, smt-transfer or statistical")
    ] = "nmt",
    job_token: Annotated[
        str | None, typer.Option(envvar="SERVAL_JOB_TOKEN", help="this build's job token")
    ] = None,
) -> None:
    """Run one build job and report it to the API service."""
    from build_jobs.job import run_job
    from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec, die_with_parent, take_job_token
    from serval_common.store import store_from_settings

    if not die_with_parent():
        raise typer.Exit(CANCELED_EXIT_CODE)

    settings = Settings()
    configure_logging(settings)
    token = job_token or os.environ.get("SERVAL_JOB_TOKEN", "")
    if not token:
        taken = take_job_token(store_from_settings(settings, store_url), build_id)
        if taken is None:
            typer.echo(
                f"no job token: SERVAL_JOB_TOKEN is unset and build {build_id}'s token is not (or no "
                "longer) in the model store",
                err=True,
            )
            raise typer.Exit(2)
        token = taken
    args = JobSpec(
        build_id=build_id,
        engine_id=engine_id,
        source_language=source_language,
        target_language=target_language,
        revision=revision,
        train=train,
        options_json=options,
        store_url=store_url or settings.resolved_store_url,
        api_address=api_address,
        job_token=token,
        engine_type=engine_type,
    )
    raise typer.Exit(run_job(args, settings))
