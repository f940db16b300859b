"""First credentials of a fresh install, written to the database directly.

`serval demo` calls this on its first run, before it starts the API service: here, and only
here besides the API service itself, a missing database is made (`admin_database.open_database`
with `create=True`); `serval admin …` refuses one unless given `--create`."""

from __future__ import annotations

import asyncio

from serval_common.settings import Settings


def create_credentials(settings: Settings, owner: str) -> tuple[str, str]:
    """An API key with every engine scope for `owner`, and a node token. Both shown only here."""
    from serval_api.auth import ALL_SCOPES
    from serval_api.service.keys import create_api_key, create_node_token
    from serval_cli.admin_database import open_database

    async def create() -> tuple[str, str]:
        db = await open_database(settings, create=True)
        try:
            _, api_key = await create_api_key(db, owner, ALL_SCOPES)
            _, node_token = await create_node_token(db, owner)
            return api_key, node_token
        finally:
            await db.close()

    return asyncio.run(create())
