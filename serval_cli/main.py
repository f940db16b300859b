"""`serval`: run the API service, an inference node, build jobs, admin tasks and the demo."""

from __future__ import annotations

import typer

from build_jobs.cli import app as job_app
from serval_cli import admin, builds, demo, engines, files, servers, train, translate

app = typer.Typer(
    help="Serval-compatible translation service with live NLLB engines.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("api")(servers.api)
app.command("node")(servers.node)
app.command("demo")(demo.demo)
app.command("translate")(translate.translate)
app.command("train")(train.train)
app.add_typer(admin.app, name="admin")
app.add_typer(builds.app, name="build")
app.add_typer(engines.app, name="engine")
app.add_typer(files.app, name="files")
app.add_typer(job_app, name="job")
