"""The administrator's tools as an administrator meets them: `serval admin` names the database it
works on and never makes one unasked (run from the wrong folder it used to make an empty one and
print a key the service rejects), its listings give whole ids (piped, a rich table cut them to
`1363d2cadfc39…`, which revoke then did not find) and JSON for scripts, a node started without
`--node-id` keeps its id across restarts, and stopping `serval api` while the web console waits on
its live view is not held up by it and logs no traceback.

The CLI runs in-process through typer's `CliRunner`, whose output is not a terminal: the piped case.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner, Result

from inference_gpu.node import InferenceNode
from serval_api.service.admin_console import SERVICE_STOPPING
from serval_cli import processes
from serval_cli.main import app
from serval_common.settings import NodeSettings, Settings
from tests.helpers import free_port, metrics_text, wait_until

runner = CliRunner()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with no `.serval/` in it, as the current folder, and no database settings."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for name in ("SERVAL_HOME", "SERVAL_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return folder


def admin(*args: str) -> Result:
    return runner.invoke(app, ["admin", *args])


def test_admin_commands_name_their_database_and_never_make_one_unasked(elsewhere: Path) -> None:
    database = elsewhere / ".serval" / "serval.db"
    for command in (
        ("api-key", "create", "--owner", "me"),
        ("api-key", "list"),
        ("api-key", "revoke", "0123456789abcdef01234567"),
        ("node-token", "create"),
        ("node-token", "list"),
    ):
        refused = admin(*command)
        assert refused.exit_code == 1, refused.output
        assert f"database: sqlite:///{database}" in refused.stderr, "it says which database it looked for"
        assert "current folder" in refused.stderr
        for hint in ("no Serval database", "SERVAL_HOME", "SERVAL_DATABASE_URL", "--create"):
            assert hint in refused.stderr, (hint, refused.stderr)
        assert "Traceback" not in refused.output
        assert "serval_" not in refused.stdout, "no key is printed"
        assert not database.exists(), f"`serval admin {' '.join(command)}` made a database"

    created = admin("api-key", "create", "--owner", "me", "--scope", "admin", "--create")
    assert created.exit_code == 0, created.output
    assert f"database: sqlite:///{database}" in created.stderr
    assert database.is_file()
    assert created.stdout.strip().splitlines()[-1].startswith("serval_")
    listed = admin("api-key", "list")
    assert listed.exit_code == 0 and f"database: sqlite:///{database}" in listed.stderr


def test_the_database_a_url_names_is_shown_without_its_password(elsewhere: Path) -> None:
    url = f"postgresql://serval:hunter2@127.0.0.1:{free_port()}/serval"  # nothing listens there
    refused = admin("api-key", "list", "--database-url", url)
    assert refused.exit_code == 1
    assert "hunter2" not in refused.output
    assert f"database: postgresql://serval:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in refused.stderr
    assert "cannot open the database" in refused.stderr and "Traceback" not in refused.output


def test_a_key_without_admin_says_it_cannot_open_the_console(tmp_path: Path, database_url: str) -> None:
    where = ["--home", str(tmp_path), "--database-url", database_url]
    made = admin("api-key", "create", "--owner", "translators", *where)
    assert made.exit_code == 0, made.output
    assert "--scope admin" in made.stderr
    assert "admin" not in made.stdout.splitlines()[0].split("(", 1)[1], "the default leaves admin out"
    shown = runner.invoke(app, ["admin", "api-key", "create", "--help"]).output
    help_text = re.sub(r"[│\s]+", " ", shown)  # the words, without the help panel's frame
    assert "but NOT admin" in help_text and "needs --scope admin" in help_text, help_text


def test_listings_give_whole_ids_when_piped_and_json_for_scripts(tmp_path: Path, database_url: str) -> None:
    where = ["--home", str(tmp_path), "--database-url", database_url]
    owner = "a-team-with-a-rather-long-owner-name-" + "x" * 40  # wider than any terminal's share
    made = [admin("api-key", "create", "--owner", owner, *where) for _ in range(2)]
    assert all(m.exit_code == 0 for m in made), [m.output for m in made]
    token = admin("node-token", "create", "--name", "gpu-pool", *where)
    assert token.exit_code == 0, token.output

    listed = admin("api-key", "list", *where)
    assert listed.exit_code == 0, listed.output
    assert "…" not in listed.stdout
    header, *rows = listed.stdout.splitlines()
    assert header.split("\t")[0] == "id"
    ids = [row.split("\t")[0] for row in rows]
    assert len(ids) == 2 and all(len(key_id) == 24 for key_id in ids), ids
    assert all(owner in row for row in rows)

    revoked = admin("api-key", "revoke", ids[0], *where)  # the id exactly as the listing gave it
    assert revoked.exit_code == 0, revoked.output
    as_json = admin("api-key", "list", "--json", *where)
    keys = {key["id"]: key for key in json.loads(as_json.stdout)}
    assert set(keys) == set(ids)
    assert keys[ids[0]]["revokedAt"] is not None and keys[ids[1]]["revokedAt"] is None
    assert keys[ids[1]]["owner"] == owner and "read:translation_engines" in keys[ids[1]]["scopes"]
    assert not any("serval_" in str(key.get("key", "")) for key in keys.values()), "never a secret"

    unknown = admin("api-key", "revoke", ids[1][:13], *where)  # a cut id, as rich used to show it
    assert unknown.exit_code == 1 and "whole id" in unknown.stderr

    tokens = json.loads(admin("node-token", "list", "--json", *where).stdout)
    assert [t["name"] for t in tokens] == ["gpu-pool"] and len(tokens[0]["id"]) == 24
    piped = admin("node-token", "list", *where).stdout
    assert tokens[0]["id"] in piped.splitlines()[1].split("\t")


def node_settings(home: Path, node_id: str | None = None, device_index: int = 0) -> Settings:
    return Settings(home=home, node=NodeSettings(device="cpu", device_index=device_index, node_id=node_id))


def test_a_node_started_without_an_id_keeps_the_same_one(tmp_path: Path) -> None:
    first = InferenceNode(node_settings(tmp_path)).node_id
    assert first == f"{socket.gethostname()}-cpu"
    assert (tmp_path / "node-id-cpu").read_text().strip() == first
    assert InferenceNode(node_settings(tmp_path)).node_id == first, "a restart comes back as itself"

    # A container whose host name changes with each start keeps the id its home remembers.
    (tmp_path / "node-id-cpu").write_text("gpu-a-0\n")
    assert InferenceNode(node_settings(tmp_path)).node_id == "gpu-a-0"
    assert InferenceNode(node_settings(tmp_path, node_id="chosen")).node_id == "chosen"
    assert (tmp_path / "node-id-cpu").read_text().strip() == "gpu-a-0", "--node-id changes nothing kept"


def long_polls_waiting(rest_url: str) -> int:
    for family in text_string_to_metric_families(metrics_text(rest_url)):
        if family.name == "serval_api_long_polls_waiting":
            return int(family.samples[0].value)
    raise AssertionError("/metrics has no serval_api_long_polls_waiting")


def test_stopping_the_service_ends_the_consoles_live_view_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serval api` stopped (SIGTERM, as systemd does) while the console's overview long poll
    waits: the service answers it at once with 503 "stopping" (only a stopping service says so:
    the poll's own end would answer 200), rather than holding its shutdown until the poll's 25 s
    are over and then cancelling it with a traceback."""
    monkeypatch.delenv("SERVAL_DATABASE_URL", raising=False)  # the service's database: SQLite in its home
    where = ["--home", str(tmp_path)]
    made = admin("api-key", "create", "--owner", "ops", "--scope", "admin", "--create", *where)
    assert made.exit_code == 0, made.output
    key = made.stdout.strip().splitlines()[-1]
    grpc_port, rest_port = free_port(), free_port()
    log = tmp_path / "api.log"
    api = processes.start(
        ["api", *where, "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
        log,
    )
    rest_url = f"http://127.0.0.1:{rest_port}"
    answers: list[httpx.Response | Exception] = []
    try:
        processes.RestClient(rest_url, key).wait_until_up(api)
        with httpx.Client(base_url=rest_url, headers={"X-API-Key": key}, timeout=120) as console:
            overview = console.get("/api/v1/admin/overview")
            assert overview.status_code == 200, overview.text
            since = overview.json()["version"]

            def live_view() -> None:
                try:
                    answers.append(console.get("/api/v1/admin/overview", params={"since": since, "wait": 25}))
                except Exception as exc:  # the test reads it below
                    answers.append(exc)

            waiting = threading.Thread(target=live_view)
            waiting.start()
            wait_until(
                lambda: long_polls_waiting(rest_url) == 1 or bool(answers), 60, "the live view waiting"
            )
            assert not answers, f"the live view was answered at once: {answers}"
            api.send_signal(signal.SIGTERM)
            waiting.join(120)
            assert api.wait(120) == 0
    finally:
        processes.stop(api)
    [answer] = answers
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 503, answer.text
    assert answer.json()["message"] == SERVICE_STOPPING, "ended by the shutdown, not by its wait"
    assert answer.headers.get("retry-after")
    text = log.read_text()
    assert "API service stopped" in text
    for trace in ("Traceback", "CancelledError", "Exception in ASGI application"):
        assert trace not in text, text[-4000:]
