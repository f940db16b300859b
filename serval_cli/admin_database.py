"""Which database `serval admin api-key …` and `node-token …` work on, said every time, and never
a new one made by accident.

Those commands write the API service's database directly. Run from another folder, the default
(`.serval/serval.db` under the current folder) is a different file: before this check the command
made a new, empty database there and printed a key the running service had never heard of. Now a
command names the database it used (on stderr, password hidden) and refuses one that does not
exist yet, or holds no Serval tables, unless `--create` asks for it. The API service and `serval
demo` still create their database on their first run (`bootstrap.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from serval_common.settings import Settings

if TYPE_CHECKING:
    from serval_api.db.database import Database

# SQLAlchemy and the service's database code are imported where they are used: the node's image
# runs `serval` without them (tests/test_dockerfiles.py), and only these admin commands need them.

VERSION_TABLE = "alembic_version"
"""The migration history every database the service made has (`serval_api/db/migrations`)."""

WHERE_TO_POINT = (
    "point the command at the service's database with --home / SERVAL_HOME (the folder holding "
    "serval.db) or --database-url / SERVAL_DATABASE_URL"
)


class DatabaseRefused(Exception):
    """The command cannot use the database: one sentence that says what to do."""


def shown_url(url: str) -> str:
    """`url` with any password hidden, for messages and logs."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "an unparsable database URL"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases (and SQLite in memory)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def origin(settings: Settings) -> str:
    """Where the database URL came from, in words."""
    if settings.database_url:
        return "from --database-url / SERVAL_DATABASE_URL"
    home = settings.home
    if home == Path(".serval"):
        return f"the default: .serval in the current folder, {Path.cwd()}"
    return f"in the data folder {home}, from --home / SERVAL_HOME"


async def open_database(settings: Settings, *, create: bool) -> Database:
    """The database `settings` name, upgraded to the newest schema. Unless `create`, one that does
    not exist yet or holds no Serval tables is refused (`DatabaseRefused`), before anything is
    written; so is one that cannot be reached."""
    from sqlalchemy import inspect
    from sqlalchemy.exc import DBAPIError

    from serval_api.db.database import Database
    from serval_api.db.migrations import UnmanagedSchema

    url = settings.resolved_database_url
    shown = shown_url(url)
    missing = (
        f"there is no Serval database at {shown}: {WHERE_TO_POINT}, or add --create to make a new, empty one"
    )
    path = sqlite_path(url)
    if not create and path is not None and (not path.is_file() or path.stat().st_size == 0):
        raise DatabaseRefused(missing)
    db = Database(url)
    try:
        if not create:
            async with db.engine.connect() as conn:
                tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
            if VERSION_TABLE not in tables:
                raise DatabaseRefused(missing)
        await db.migrate()
    except DatabaseRefused:
        await db.close()
        raise
    except UnmanagedSchema as exc:
        await db.close()
        raise DatabaseRefused(str(exc)) from None
    except (DBAPIError, OSError) as exc:
        await db.close()
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseRefused(
            f"cannot open the database {shown} ({origin(settings)}): {reason}; check that it runs "
            f"and that the URL is right, or {WHERE_TO_POINT}"
        ) from None
    except Exception:
        await db.close()
        raise
    return db
