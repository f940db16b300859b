"""Migrations from the models: `make migration MESSAGE="what changed"`
(= `python -m serval_api.db.migrations.regenerate "what changed"`).

Databases made by released versions exist, so a model change gets a new revision: this upgrades
a scratch SQLite database to head, autogenerates the next numbered revision against it, and
formats it with ruff. Read the result (autogenerate misses renames and data moves) and keep
`tests/test_migrations.py` green on both databases.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine

from serval_api.db.migrations import SCRIPT_LOCATION, alembic_config


def add_revision(message: str) -> Path:
    versions = SCRIPT_LOCATION / "versions"
    numbers = [int(p.name[:4]) for p in versions.glob("[0-9][0-9][0-9][0-9]_*.py")]
    rev_id = f"{max(numbers, default=0) + 1:04d}"
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/scratch.db")
        try:
            with engine.begin() as connection:
                command.upgrade(alembic_config(connection), "head")
            with engine.begin() as connection:
                command.revision(alembic_config(connection), message, autogenerate=True, rev_id=rev_id)
        finally:
            engine.dispose()
    (path,) = versions.glob(f"{rev_id}_*.py")
    for args in (["check", "--fix", "--quiet"], ["format", "--quiet"]):
        subprocess.run([sys.executable, "-m", "ruff", *args, str(path)], check=True)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].strip():
        raise SystemExit('usage: python -m serval_api.db.migrations.regenerate "what changed"')
    print(f"wrote {add_revision(sys.argv[1].strip())}")
