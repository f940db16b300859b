"""Alembic's entry point: runs migrations on the connection `alembic_config` was given."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from serval_api.db.migrations import context_options


def run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, **context_options(connection))
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: run them against a database")
_connection = context.config.attributes.get("connection")
if _connection is None:
    raise SystemExit("run migrations through Database.migrate() or serval_api.db.migrations.upgrade()")
run_migrations(_connection)
