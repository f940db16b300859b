"""`serval admin …`: API keys, node tokens, nodes and base models.

API keys and node tokens work on the database directly, so a fresh install can create its first
admin key; `serval admin nodes …` controls live nodes through a running API service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from serval_cli import base_models, nodes
from serval_cli.config import load_settings

app = typer.Typer(help="Administration: API keys, node tokens, nodes, base models.", no_args_is_help=True)
api_keys = typer.Typer(help="Client API keys (shown once when created).", no_args_is_help=True)
node_tokens = typer.Typer(help="Tokens inference nodes use to register.", no_args_is_help=True)
app.add_typer(api_keys, name="api-key")
app.add_typer(node_tokens, name="node-token")
app.add_typer(nodes.app, name="nodes")
app.add_typer(base_models.app, name="base-model")

console = Console()
T = TypeVar("T")

Home = Annotated[Path | None, typer.Option(envvar="SERVAL_HOME", help="data folder for the embedded mode")]
DatabaseUrl = Annotated[str | None, typer.Option(help="SQLAlchemy URL; default SQLite in HOME")]


def with_db(home: Path | None, database_url: str | None, work: Callable[[Any], Awaitable[T]]) -> T:
    from serval_api.db.database import Database
    from serval_api.errors import ServalError

    async def run() -> T:
        db = Database(load_settings(home=home, database_url=database_url).resolved_database_url)
        try:
            await db.migrate()
            return await work(db)
        finally:
            await db.close()

    try:
        return asyncio.run(run())
    except ServalError as exc:
        console.print(f"[red]{exc.message}[/]")
        raise typer.Exit(1) from None


def table(*columns: str) -> Table:
    grid = Table(*columns, box=None, header_style="bold")
    return grid


@api_keys.command("create")
def api_key_create(
    owner: Annotated[str, typer.Option(help="the identity that owns what this key creates")],
    scope: Annotated[list[str] | None, typer.Option(help="a scope (repeat); default: all scopes")] = None,
    home: Home = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key and print it (once)."""
    from serval_api.auth import ALL_SCOPES
    from serval_api.service.keys import create_api_key

    record, plaintext = with_db(home, database_url, lambda db: create_api_key(db, owner, scope or ALL_SCOPES))
    console.print(f"API key {record.id} for {owner} ({', '.join(record.scopes)}); it is not shown again:")
    typer.echo(plaintext)


@api_keys.command("list")
def api_key_list(
    owner: Annotated[str | None, typer.Option(help="only this owner's keys")] = None,
    home: Home = None,
    database_url: DatabaseUrl = None,
) -> None:
    """List API keys (never their secrets)."""
    from serval_api.service.keys import list_api_keys

    grid = table("id", "owner", "prefix", "scopes", "created", "revoked")
    for key in with_db(home, database_url, lambda db: list_api_keys(db, owner)):
        revoked = f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else ""
        grid.add_row(
            key.id, key.owner, key.prefix, " ".join(key.scopes), f"{key.created_at:%Y-%m-%d %H:%M}", revoked
        )
    console.print(grid)


@api_keys.command("revoke")
def api_key_revoke(key_id: str, home: Home = None, database_url: DatabaseUrl = None) -> None:
    """Revoke an API key."""
    from serval_api.service.keys import revoke_api_key

    with_db(home, database_url, lambda db: revoke_api_key(db, key_id))
    console.print(f"revoked API key {key_id}")


@node_tokens.command("create")
def node_token_create(
    name: Annotated[str, typer.Option(help="what the token is for, e.g. the GPU pool")] = "default",
    home: Home = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a node token and print it (once)."""
    from serval_api.service.keys import create_node_token

    record, plaintext = with_db(home, database_url, lambda db: create_node_token(db, name))
    console.print(f"node token {record.id} ({name}); it is not shown again:")
    typer.echo(plaintext)


@node_tokens.command("list")
def node_token_list(home: Home = None, database_url: DatabaseUrl = None) -> None:
    """List node tokens (never their secrets)."""
    from serval_api.service.keys import list_node_tokens

    grid = table("id", "name", "created", "revoked")
    for token in with_db(home, database_url, list_node_tokens):
        revoked = f"{token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else ""
        grid.add_row(token.id, token.name, f"{token.created_at:%Y-%m-%d %H:%M}", revoked)
    console.print(grid)


@node_tokens.command("revoke")
def node_token_revoke(token_id: str, home: Home = None, database_url: DatabaseUrl = None) -> None:
    """Revoke a node token."""
    from serval_api.service.keys import revoke_node_token

    with_db(home, database_url, lambda db: revoke_node_token(db, token_id))
    console.print(f"revoked node token {token_id}")
