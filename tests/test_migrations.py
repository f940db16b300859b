"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL.

When this fails after a model change, add a migration: `make migration MESSAGE="what changed"`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, inspect, select, text
from sqlalchemy import column as sa_column
from sqlalchemy import table as sa_table
from sqlalchemy.engine import Connection

from serval_api.db.database import Database
from serval_api.db.migrations import UnmanagedSchema, context_options, downgrade, upgrade
from serval_api.db.models import ApiKeyRow, Base
from serval_api.rest.api_keys import api_key_dto
from serval_api.service import build_corpora
from serval_api.service.keys import authenticate_api_key, hash_secret


def differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts=context_options(connection))
    return list(compare_metadata(context, Base.metadata))


def tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def test_migrated_database_matches_the_models(empty_database_url: str) -> None:
    async def check() -> list[Any]:
        db = Database(empty_database_url)
        try:
            await db.migrate()
            await db.migrate()
            async with db.engine.connect() as conn:
                return await conn.run_sync(differences)
        finally:
            await db.close()

    assert asyncio.run(check()) == []


def test_downgrade_to_base_and_back(empty_database_url: str) -> None:
    async def check() -> tuple[set[str], set[str]]:
        db = Database(empty_database_url)
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


def test_tables_without_migration_history_are_not_touched(empty_database_url: str) -> None:
    async def check() -> set[str]:
        db = Database(empty_database_url)
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


def test_a_database_of_the_first_release_upgrades_with_its_rows(empty_database_url: str) -> None:
    """Rows written under revision 0001 survive the upgrade to head, new columns defaulted."""

    async def check() -> tuple[Any, ...]:
        db = Database(empty_database_url)
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


def test_builds_corpus_entries_move_to_the_models_serialization_and_back(empty_database_url: str) -> None:
    """A build written under 0004 stored the client's camelCase request; 0005 rewrites it as
    `build_corpora` serializes it (a `corpusId` then meant a parallel corpus), and back."""
    camel_train = [
        {
            "parallelCorpusId": "pc1",
            "sourceFilters": [{"corpusId": "c1", "textIds": ["MAT"]}],
            "targetFilters": [{"corpusId": "c2", "scriptureRange": "MAT1-2"}],
        }
    ]
    camel_pretranslate = [{"corpusId": "pc1", "sourceFilters": [{"corpusId": "c1"}]}]

    async def check() -> tuple[Any, ...]:
        db = Database(empty_database_url)
        try:
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: upgrade(c, "0004"))
                await conn.execute(
                    text(
                        "INSERT INTO engines (id, owner, source_language, target_language, type, source_code,"
                        " target_code, is_building, model_revision, confidence, corpus_size, date_created)"
                        " VALUES ('e1', 'me', 'en', 'sw', 'nmt', 'eng_Latn', 'swh_Latn', false, 1, 0, 0,"
                        " CURRENT_TIMESTAMP)"
                    )
                )
                builds = sa_table(
                    "builds",
                    sa_column("id"),
                    sa_column("engine_id"),
                    sa_column("owner"),
                    sa_column("revision"),
                    sa_column("state"),
                    sa_column("step"),
                    sa_column("target_model_revision"),
                    sa_column("date_created"),
                    sa_column("train_on", JSON()),
                    sa_column("pretranslate", JSON()),
                    sa_column("restarts"),
                )
                now = datetime.now(UTC)
                common = {"engine_id": "e1", "owner": "me", "revision": 1, "step": 0, "restarts": 0}
                await conn.execute(
                    builds.insert(),
                    [
                        {
                            "id": "b1",
                            "state": "Completed",
                            "target_model_revision": 1,
                            "date_created": now,
                            "train_on": camel_train,
                            "pretranslate": camel_pretranslate,
                            **common,
                        },
                        {
                            "id": "b2",
                            "state": "Completed",
                            "target_model_revision": 2,
                            "date_created": now,
                            "train_on": [],
                            "pretranslate": None,
                            **common,
                        },
                    ],
                )
            await db.migrate()
            query = select(builds.c.id, builds.c.train_on, builds.c.pretranslate).order_by(builds.c.id)
            async with db.engine.connect() as conn:
                upgraded = [tuple(r) for r in (await conn.execute(query)).all()]
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: downgrade(c, "0004"))
            async with db.engine.connect() as conn:
                downgraded = [tuple(r) for r in (await conn.execute(query)).all()]
            return upgraded, downgraded
        finally:
            await db.close()

    upgraded, downgraded = asyncio.run(check())
    b1, b2 = upgraded
    assert b2 == ("b2", [], None)
    train_on = build_corpora.load_training(b1[1])
    pretranslate = build_corpora.load_pretranslate(b1[2])
    assert train_on == [
        build_corpora.TrainingEntry(
            parallel_corpus_id="pc1",
            source_filters=(build_corpora.CorpusFilter(corpus_id="c1", text_ids=("MAT",)),),
            target_filters=(build_corpora.CorpusFilter(corpus_id="c2", scripture_range="MAT1-2"),),
        )
    ]
    assert pretranslate == [
        build_corpora.PretranslateEntry(
            parallel_corpus_id="pc1", source_filters=(build_corpora.CorpusFilter(corpus_id="c1"),)
        )
    ]
    assert b1[1] == build_corpora.dump(train_on) and b1[2] == build_corpora.dump(pretranslate)
    assert downgraded[0] == (
        "b1",
        camel_train,
        [{"parallelCorpusId": "pc1", "sourceFilters": [{"corpusId": "c1"}]}],
    )
    assert downgraded[1] == ("b2", [], None)


def test_engines_next_model_revision_is_backfilled_past_every_revision_given(empty_database_url: str) -> None:
    """0006 starts each engine's counter past its builds' target revisions (a faulted build's
    too: its partial folder may be in the store) and its current revision; down and up again
    keeps every engine and build."""

    async def check() -> tuple[dict[str, int], int, dict[str, int]]:
        db = Database(empty_database_url)
        try:
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: upgrade(c, "0005"))
                for engine_id, model_revision in (("built", 2), ("unbuilt", 0), ("odd", 5)):
                    await conn.execute(
                        text(
                            "INSERT INTO engines (id, owner, source_language, target_language, type,"
                            " source_code, target_code, is_building, model_revision, confidence,"
                            " corpus_size, date_created) VALUES (:id, 'me', 'en', 'sw', 'nmt', 'eng_Latn',"
                            " 'swh_Latn', false, :rev, 0, 0, CURRENT_TIMESTAMP)"
                        ),
                        {"id": engine_id, "rev": model_revision},
                    )
                for build_id, engine_id, state, target in (
                    ("b1", "built", "Completed", 1),
                    ("b2", "built", "Completed", 2),
                    ("b3", "built", "Faulted", 3),
                    ("b4", "odd", "Canceled", 2),
                ):
                    await conn.execute(
                        text(
                            "INSERT INTO builds (id, engine_id, owner, revision, state, step,"
                            " target_model_revision, date_created, restarts)"
                            " VALUES (:id, :engine, 'me', 1, :state, 0, :target, CURRENT_TIMESTAMP, 0)"
                        ),
                        {"id": build_id, "engine": engine_id, "state": state, "target": target},
                    )
            await db.migrate()
            query = text("SELECT id, next_model_revision FROM engines")
            async with db.engine.connect() as conn:
                upgraded = {r[0]: r[1] for r in (await conn.execute(query)).all()}
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: downgrade(c, "0005"))
            async with db.engine.connect() as conn:
                kept = (await conn.execute(text("SELECT count(*) FROM builds"))).scalar_one()
            await db.migrate()
            async with db.engine.connect() as conn:
                again = {r[0]: r[1] for r in (await conn.execute(query)).all()}
            return upgraded, kept, again
        finally:
            await db.close()

    upgraded, kept, again = asyncio.run(check())
    assert upgraded == {"built": 4, "unbuilt": 1, "odd": 6}
    assert kept == 4, "dropping the column keeps the engines' builds"
    assert again == upgraded


def test_api_keys_made_before_names_and_expiry_keep_working(empty_database_url: str) -> None:
    """0010 adds `name` and `expires_at` in place: a key written under 0009 is still found by its
    hash, authenticates (it never expires) and reads its prefix as its name; down and up again
    keeps it."""

    async def check() -> tuple[Any, ...]:
        db = Database(empty_database_url)
        try:
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: upgrade(c, "0009"))
                await conn.execute(
                    text(
                        "INSERT INTO api_keys (id, owner, scopes, key_hash, prefix, created_at)"
                        " VALUES ('k1', 'me', :scopes, :hash, 'serval_abcdef', CURRENT_TIMESTAMP)"
                    ),
                    {"scopes": '["read:files"]', "hash": hash_secret("serval_old-key")},
                )
            await db.migrate()
            caller = await authenticate_api_key(db, "serval_old-key")
            async with db.session() as s:
                record = await s.get(ApiKeyRow, "k1")
                assert record is not None
                dto = api_key_dto("http://x", record)
            async with db.engine.begin() as conn:
                await conn.run_sync(lambda c: downgrade(c, "0009"))
            async with db.engine.connect() as conn:
                kept = (await conn.execute(text("SELECT count(*) FROM api_keys"))).scalar_one()
            await db.migrate()
            return caller, dto.name, dto.expires_at, kept
        finally:
            await db.close()

    caller, name, expires_at, kept = asyncio.run(check())
    assert caller is not None and caller.owner == "me" and caller.expires_at is None
    assert (name, expires_at, kept) == ("serval_abcdef", None, 1)
