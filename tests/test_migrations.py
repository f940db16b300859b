"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL.

When this fails after a model change, add a migration: `make migration MESSAGE="what changed"`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from serval_api.db.database import Database
from serval_api.db.migrations import UnmanagedSchema, context_options, downgrade, upgrade
from serval_api.db.models import Base


def differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts=context_options(connection))
    return list(compare_metadata(context, Base.metadata))


def tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def test_migrated_database_matches_the_models(database_url: str) -> None:
    async def check() -> list[Any]:
        db = Database(database_url)
        try:
            await db.migrate()
            await db.migrate()
            async with db.engine.connect() as conn:
                return await conn.run_sync(differences)
        finally:
            await db.close()

    assert asyncio.run(check()) == []


def test_downgrade_to_base_and_back(database_url: str) -> None:
    async def check() -> tuple[set[str], set[str]]:
        db = Database(database_url)
        try:
            await db.migrate()
            async with db.engine.begin() as conn:
                await conn.run_sync(downgrade)
            async with db.engine.connect() as conn:
                emptied = await conn.run_sync(tables)
            await db.migrate()
            async with db.engine.connect() as conn:
                return emptied, await conn.run_sync(tables)
        finally:
            await db.close()

    emptied, migrated = asyncio.run(check())
    assert emptied == {"alembic_version"}
    assert migrated == set(Base.metadata.tables) | {"alembic_version"}


def test_tables_without_migration_history_are_not_touched(database_url: str) -> None:
    async def check() -> set[str]:
        db = Database(database_url)
        try:
            async with db.engine.begin() as conn:
                await conn.execute(text("CREATE TABLE engines (id VARCHAR(64) PRIMARY KEY)"))
            with pytest.raises(UnmanagedSchema, match="no migration history"):
                await db.migrate()
            async with db.engine.connect() as conn:
                return await conn.run_sync(tables)
        finally:
            await db.close()

    assert asyncio.run(check()) == {"engines"}


def test_a_database_of_the_first_release_upgrades_with_its_rows(database_url: str) -> None:
    """Rows written under revision 0001 survive the upgrade to head, new columns defaulted."""

    async def check() -> tuple[Any, ...]:
        db = Database(database_url)
        try:
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: upgrade(c, "0001"))
                await conn.execute(
                    text(
                        "INSERT INTO engines (id, owner, source_language, target_language, type, source_code,"
                        " target_code, is_building, model_revision, confidence, corpus_size, date_created)"
                        " VALUES ('e1', 'me', 'en', 'sw', 'nmt', 'eng_Latn', 'swh_Latn', false, 1, 0, 0,"
                        " CURRENT_TIMESTAMP)"
                    )
                )
                await conn.execute(
                    text(
                        "INSERT INTO builds (id, engine_id, owner, revision, state, step,"
                        " target_model_revision, date_created)"
                        " VALUES ('b1', 'e1', 'me', 3, 'Completed', 0, 1, CURRENT_TIMESTAMP)"
                    )
                )
            await db.migrate()
            async with db.engine.connect() as conn:
                row = (await conn.execute(text("SELECT id, revision, job_ref, restarts FROM builds"))).one()
                return tuple(row)
        finally:
            await db.close()

    assert asyncio.run(check()) == ("b1", 3, None, 0)
