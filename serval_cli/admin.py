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
LimitOption = Annotated[
    list[str] | None,
    typer.Option(
        help="override a per-key limit for this key, NAME=N (repeat): translate_per_minute, "
        "build_starts_per_hour, concurrent_long_polls, max_chars_per_request; 0 lifts the limit "
        "(docs/limits.md)"
    ),
]


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
    engine: Annotated[
        str | None,
        typer.Option(
            help="bind the key to one of the owner's translation engines: SIL Converters and "
            "LibreTranslate clients using it translate with that engine (default: the public base model)"
        ),
    ] = None,
    limit: LimitOption = None,
    home: Home = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key and print it (once)."""
    from serval_api.auth import ALL_SCOPES
    from serval_api.service.keys import check_bindable_engine, check_limits, create_api_key

    overrides = parse_limits(limit or [])

    async def create(db: Any) -> Any:
        check_limits(overrides)
        if engine:
            await check_bindable_engine(db, owner, engine)
        return await create_api_key(db, owner, scope or ALL_SCOPES, engine_id=engine, overrides=overrides)

    record, plaintext = with_db(home, database_url, create)
    bound = f", bound to engine {engine}" if engine else ""
    console.print(
        f"API key {record.id} for {owner} ({', '.join(record.scopes)}{bound}); it is not shown again:"
    )
    typer.echo(plaintext)


@api_keys.command("limits")
def api_key_limits(
    key_id: str,
    limit: LimitOption = None,
    home: Home = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Set an API key's limit overrides (replacing any it had; none given: the settings again).
    Running replicas use them within `api.lookup_cache_s`."""
    from serval_api.service.keys import set_api_key_limits

    overrides = parse_limits(limit or [])
    with_db(home, database_url, lambda db: set_api_key_limits(db, key_id, overrides))
    shown = ", ".join(f"{k}={v}" for k, v in (overrides.stored() or {}).items()) or "the settings"
    console.print(f"API key {key_id} limits: {shown}")


def parse_limits(values: list[str]) -> Any:
    """`NAME=N` pairs (NAME as in `KEY_LIMIT_FIELDS`, dashes allowed) as a `KeyLimits`."""
    from serval_api.auth import KEY_LIMIT_FIELDS, KeyLimits

    chosen: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in KEY_LIMIT_FIELDS or not number.strip().isdigit():
            raise typer.BadParameter(
                f"{value!r}: expected NAME=N with NAME one of {', '.join(KEY_LIMIT_FIELDS)}",
                param_hint="--limit",
            )
        chosen[name] = int(number)
    return KeyLimits(**chosen)


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
