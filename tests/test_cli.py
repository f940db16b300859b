"""The `serval` command: every sub-command has help, and the admin commands work on a fresh
database when asked to make it (`--create`), so a new install is never locked out
(tests/test_admin_tools.py: the database they name and the one they refuse)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from serval_cli.main import app

runner = CliRunner()

COMMANDS = [
    [],
    ["api"],
    ["node"],
    ["demo"],
    ["translate"],
    ["job", "run"],
    ["admin"],
    ["admin", "api-key", "create"],
    ["admin", "node-token", "create"],
    ["admin", "nodes", "list"],
    ["admin", "nodes", "drain"],
    ["admin", "nodes", "undrain"],
    ["admin", "nodes", "load"],
    ["admin", "nodes", "unload"],
    ["admin", "base-model", "make-tiny"],
    ["admin", "base-model", "import"],
    ["admin", "base-model", "list"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "serval")
def test_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_api_keys_on_a_fresh_database(tmp_path: Path, empty_database_url: str) -> None:
    home = ["--home", str(tmp_path), "--database-url", empty_database_url]
    created = runner.invoke(app, ["admin", "api-key", "create", "--owner", "alice", "--create", *home])
    assert created.exit_code == 0, created.output
    key = created.output.strip().splitlines()[-1]
    assert key.startswith("serval_")
    key_id = re.search(r"API key (\w+)", created.output).group(1)  # type: ignore[union-attr]

    listed = runner.invoke(app, ["admin", "api-key", "list", *home])
    assert "alice" in listed.output and key not in listed.output

    def row() -> str:
        output = runner.invoke(app, ["admin", "api-key", "list", *home]).output
        return next(line for line in output.splitlines() if "alice" in line)

    assert len(re.findall(r"\d{4}-\d\d-\d\d", row())) == 1
    assert runner.invoke(app, ["admin", "api-key", "revoke", key_id, *home]).exit_code == 0
    assert len(re.findall(r"\d{4}-\d\d-\d\d", row())) == 2, "the revocation date is listed"


def test_node_tokens_on_a_fresh_database(tmp_path: Path, empty_database_url: str) -> None:
    home = ["--home", str(tmp_path), "--database-url", empty_database_url]
    created = runner.invoke(app, ["admin", "node-token", "create", "--name", "gpu-pool", "--create", *home])
    assert created.exit_code == 0, created.output
    token = created.output.strip().splitlines()[-1]
    listed = runner.invoke(app, ["admin", "node-token", "list", *home])
    assert "gpu-pool" in listed.output and token not in listed.output


def test_revoking_an_unknown_key_fails(tmp_path: Path, database_url: str) -> None:
    home = ["--home", str(tmp_path), "--database-url", database_url]
    result = runner.invoke(app, ["admin", "api-key", "revoke", "nope", *home])
    assert result.exit_code == 1
    assert "API key nope not found" in result.output


@pytest.mark.parametrize("name", ["../models/e1/1", "..", "/etc", "a..b", "．．", "x" * 101])
def test_base_model_commands_refuse_a_name_that_is_not_one(tmp_path: Path, name: str) -> None:
    """Before converting or training anything, and before the store is opened."""
    store = tmp_path / "store"
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    for command in (
        ["admin", "base-model", "import", str(hf_dir), "--name", name],
        ["admin", "base-model", "make-tiny", "--name", name, "--steps", "1"],
    ):
        result = runner.invoke(app, [*command, "--home", str(tmp_path), "--store-url", store.as_uri()])
        assert result.exit_code == 2, result.output
        assert "base model name" in result.output
    assert not store.exists() or not any(store.rglob("*"))
