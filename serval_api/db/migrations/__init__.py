"""Alembic migrations for the API service's database, configured in code (no alembic.ini).

`Database.migrate()` upgrades to head. While the project is pre-release the schema has a single
initial migration, rebuilt from the models with `make migration` (see `regenerate`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate.api import AutogenContext
from alembic.config import Config
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from serval_api.db.models import Base, UtcDateTime

SCRIPT_LOCATION = Path(__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's settings; env.py runs on `connection` (already in a transaction) when given."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("path_separator", "os")
    config.attributes["connection"] = connection
    return config


def context_options(connection: Connection) -> dict[str, Any]:
    """What env.py and the models-versus-migrations check both configure Alembic with."""
    return {
        "target_metadata": Base.metadata,
        "render_as_batch": connection.dialect.name == "sqlite",
        "compare_type": True,
        "render_item": _render_item,
    }


class UnmanagedSchema(RuntimeError):
    """The database has tables but no migration history, so upgrading could destroy data."""


def upgrade(connection: Connection, revision: str = "head") -> None:
    tables = set(inspect(connection).get_table_names())
    if tables and "alembic_version" not in tables:
        raise UnmanagedSchema(
            f"the database at {connection.engine.url.render_as_string()} has tables "
            f"({', '.join(sorted(tables)[:5])}…) but no migration history (alembic_version): it was made "
            "by a pre-release build or another program. Back it up and point SERVAL_DATABASE_URL at an "
            "empty database, or remove the file to start afresh."
        )
    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: Connection, revision: str = "base") -> None:
    command.downgrade(alembic_config(connection), revision)


def _render_item(kind: str, obj: Any, autogen_context: AutogenContext) -> str | bool:
    """Migrations must not import the models they outlive: write custom types as their storage."""
    if kind == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False
