"""`serval admin nodes …` against a running API service, as an administrator runs it: it says which
service it talks to, `--json` gives scripts the admin API's answer, and a key without the admin
scope gets one sentence that names the scope and the command that makes a key with it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from serval_api.auth import ADMIN, READ_ENGINES
from serval_cli.main import app
from tests.api.conftest import RunningApi

runner = CliRunner()


def test_nodes_list_names_the_service_and_answers_json(api: RunningApi) -> None:
    where = ["--url", api.rest_url, "--api-key", api.api_key("ops", (ADMIN,))]
    listed = runner.invoke(app, ["admin", "nodes", "list", "--json", *where])
    assert listed.exit_code == 0, listed.output
    assert f"API service: {api.rest_url}" in listed.stderr
    assert json.loads(listed.stdout) == [], "no node has connected"


def test_a_key_without_admin_is_told_which_scope_and_how_to_get_it(api: RunningApi) -> None:
    where = ["--url", api.rest_url, "--api-key", api.api_key("translators", (READ_ENGINES,))]
    refused = runner.invoke(app, ["admin", "nodes", "list", *where])
    assert refused.exit_code == 1
    assert "needs the scope 'admin'" in refused.stderr
    assert "serval admin api-key create --owner <owner> --scope admin" in refused.stderr
    assert "Traceback" not in refused.output
    down = runner.invoke(app, ["admin", "nodes", "list", "--url", "http://127.0.0.1:9", "--api-key", "k"])
    assert down.exit_code == 1 and "cannot reach the API service at http://127.0.0.1:9" in down.stderr
