"""Rebuild the initial migration from the models: `make migration`
(= `python -m serval_api.db.migrations.regenerate`).

Pre-release only, while nobody has a database to upgrade: it deletes `versions/0001_initial.py`,
autogenerates it again against an empty in-memory SQLite database, and formats it with ruff.
It refuses once a second migration exists; from the first release on, add a new revision instead
(`alembic.command.revision(alembic_config(connection), message, autogenerate=True)` on a database
at head) and keep `tests/test_migrations.py` green.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine

from serval_api.db.migrations import SCRIPT_LOCATION, alembic_config

INITIAL = "0001"


def regenerate() -> Path:
    versions = SCRIPT_LOCATION / "versions"
    existing = sorted(versions.glob("*.py"))
    if any(not p.name.startswith(f"{INITIAL}_") for p in existing):
        raise SystemExit(f"{versions} holds more than the initial migration: add a revision instead")
    for path in existing:
        path.unlink()
    engine = create_engine("sqlite://")
    try:
        with engine.begin() as connection:
            command.revision(alembic_config(connection), "initial", autogenerate=True, rev_id=INITIAL)
    finally:
        engine.dispose()
    (path,) = versions.glob(f"{INITIAL}_*.py")
    for args in (["check", "--fix", "--quiet"], ["format", "--quiet"]):
        subprocess.run([sys.executable, "-m", "ruff", *args, str(path)], check=True)
    return path


if __name__ == "__main__":
    print(f"wrote {regenerate()}")
