"""`serval admin …`: API keys, node tokens, nodes and base models.

API keys and node tokens work on the database directly, so a fresh install can create its first
admin key; `serval admin nodes …` controls live nodes through a running API service. Each database
command says on stderr which database it used, and refuses one that does not exist yet unless
`--create` asks for it (`admin_database.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from serval_cli import base_models, nodes
from serval_cli.config import load_settings
from serval_cli.service_client import JsonOutput, print_json, print_rows

app = typer.Typer(help="Administration: API keys, node tokens, nodes, base models.", no_args_is_help=True)
api_keys = typer.Typer(help="Client API keys (shown once when created).", no_args_is_help=True)
node_tokens = typer.Typer(help="Tokens inference nodes use to register.", no_args_is_help=True)
app.add_typer(api_keys, name="api-key")
app.add_typer(node_tokens, name="node-token")
app.add_typer(nodes.app, name="nodes")
app.add_typer(base_models.app, name="base-model")

console = Console(highlight=False, soft_wrap=True, markup=False)
errors = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
T = TypeVar("T")

Home = Annotated[
    Path | None,
    typer.Option(
        envvar="SERVAL_HOME",
        help="the API service's data folder, holding serval.db (default: .serval in the current folder)",
    ),
]
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        envvar="SERVAL_DATABASE_URL",
        help="the API service's database as a SQLAlchemy URL (default: SQLite serval.db in HOME)",
    ),
]
Create = Annotated[
    bool,
    typer.Option(
        "--create",
        help="make the database if there is none yet (without it, a missing database is refused: "
        "the API service makes its own on its first run)",
    ),
]
LimitOption = Annotated[
    list[str] | None,
    typer.Option(
        help="override a per-key limit for this key, NAME=N (repeat): translate_per_minute, "
        "build_starts_per_hour, concurrent_long_polls, max_chars_per_request; 0 lifts the limit "
        "(docs/limits.md)"
    ),
]
SCOPE_HELP = (
    "a scope (repeat). Default: every engine, word-alignment, file, corpus, webhook and status "
    "scope, but NOT admin: an administrator's key (the web console at /admin, `serval admin nodes`, "
    "the admin API) needs --scope admin"
)


def with_db(
    home: Path | None,
    database_url: str | None,
    work: Callable[[Any], Awaitable[T]],
    *,
    create: bool = False,
    not_found_hint: str = "",
) -> T:
    """`work(db)` on the API service's database, named on stderr first. Whatever goes wrong ends
    the command with one sentence (exit 1), never a traceback."""
    from sqlalchemy.exc import DBAPIError

    from serval_api.errors import NotFound, ServalError
    from serval_cli.admin_database import DatabaseRefused, open_database, origin, shown_url

    settings = load_settings(home=home, database_url=database_url)
    errors.print(f"database: {shown_url(settings.resolved_database_url)} ({origin(settings)})")

    async def run() -> T:
        db = await open_database(settings, create=create)
        try:
            return await work(db)
        finally:
            await db.close()

    try:
        return asyncio.run(run())
    except DatabaseRefused as exc:
        errors.print(Text(str(exc), style="red"))
    except NotFound as exc:
        errors.print(Text(f"{exc.message}{not_found_hint}", style="red"))
    except ServalError as exc:
        errors.print(Text(exc.message, style="red"))
    except DBAPIError as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        errors.print(
            Text(f"the database {shown_url(settings.resolved_database_url)} failed: {reason}", style="red")
        )
    raise typer.Exit(1)


@api_keys.command("create")
def api_key_create(
    owner: Annotated[str, typer.Option(help="the identity that owns what this key creates")],
    scope: Annotated[list[str] | None, typer.Option(help=SCOPE_HELP)] = None,
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
    create: Create = False,
) -> None:
    """Create an API key and print it (once, on the last line). Without --scope it has every
    scope but admin; `--scope admin` makes an administrator's key."""
    from serval_api.auth import ADMIN, ALL_SCOPES
    from serval_api.service.keys import check_bindable_engine, check_limits, create_api_key

    overrides = parse_limits(limit or [])

    async def create_key(db: Any) -> Any:
        check_limits(overrides)
        if engine:
            await check_bindable_engine(db, owner, engine)
        return await create_api_key(db, owner, scope or ALL_SCOPES, engine_id=engine, overrides=overrides)

    record, plaintext = with_db(home, database_url, create_key, create=create)
    if ADMIN not in record.scopes and not scope:
        # Only when the scopes were left to the default, which is every scope but admin: a key made
        # with chosen scopes (a translator's, an engine's) is meant to lack it.
        errors.print(
            "this key cannot open the web console (/admin) or `serval admin nodes`: those need --scope admin"
        )
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
    with_db(home, database_url, lambda db: set_api_key_limits(db, key_id, overrides), not_found_hint=KEY_IDS)
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
    as_json: JsonOutput = False,
    home: Home = None,
    database_url: DatabaseUrl = None,
) -> None:
    """List API keys (never their secrets), with whole ids."""
    from serval_api.service.keys import list_api_keys

    keys = with_db(home, database_url, lambda db: list_api_keys(db, owner))
    if as_json:
        print_json(
            [
                {
                    "id": key.id,
                    "owner": key.owner,
                    "name": key.name,
                    "prefix": key.prefix,
                    "scopes": list(key.scopes),
                    "engineId": key.engine_id,
                    "createdAt": iso(key.created_at),
                    "expiresAt": iso(key.expires_at),
                    "revokedAt": iso(key.revoked_at),
                    "limits": key.limits,
                }
                for key in keys
            ]
        )
        return
    print_rows(
        ("id", "owner", "prefix", "scopes", "engine", "created", "revoked"),
        [
            (
                key.id,
                key.owner,
                key.prefix,
                " ".join(key.scopes),
                key.engine_id or "",
                when(key.created_at),
                when(key.revoked_at),
            )
            for key in keys
        ],
    )


def when(moment: datetime | None) -> str:
    """A time in a listing: UTC, to the minute; "" for none."""
    return f"{moment:%Y-%m-%d %H:%M}" if moment is not None else ""


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


KEY_IDS = "; `serval admin api-key list` shows every key's whole id"
TOKEN_IDS = "; `serval admin node-token list` shows every token's whole id"


@api_keys.command("revoke")
def api_key_revoke(key_id: str, home: Home = None, database_url: DatabaseUrl = None) -> None:
    """Revoke an API key."""
    from serval_api.service.keys import revoke_api_key

    with_db(home, database_url, lambda db: revoke_api_key(db, key_id), not_found_hint=KEY_IDS)
    console.print(f"revoked API key {key_id}")


@node_tokens.command("create")
def node_token_create(
    name: Annotated[str, typer.Option(help="what the token is for, e.g. the GPU pool")] = "default",
    home: Home = None,
    database_url: DatabaseUrl = None,
    create: Create = False,
) -> None:
    """Create a node token and print it (once, on the last line)."""
    from serval_api.service.keys import create_node_token

    record, plaintext = with_db(home, database_url, lambda db: create_node_token(db, name), create=create)
    console.print(f"node token {record.id} ({name}); it is not shown again:")
    typer.echo(plaintext)


@node_tokens.command("list")
def node_token_list(as_json: JsonOutput = False, home: Home = None, database_url: DatabaseUrl = None) -> None:
    """List node tokens (never their secrets), with whole ids."""
    from serval_api.service.keys import list_node_tokens

    tokens = with_db(home, database_url, list_node_tokens)
    if as_json:
        print_json(
            [
                {"id": t.id, "name": t.name, "createdAt": iso(t.created_at), "revokedAt": iso(t.revoked_at)}
                for t in tokens
            ]
        )
        return
    print_rows(
        ("id", "name", "created", "revoked"),
        [(token.id, token.name, when(token.created_at), when(token.revoked_at)) for token in tokens],
    )


@node_tokens.command("revoke")
def node_token_revoke(token_id: str, home: Home = None, database_url: DatabaseUrl = None) -> None:
    """Revoke a node token."""
    from serval_api.service.keys import revoke_node_token

    with_db(home, database_url, lambda db: revoke_node_token(db, token_id), not_found_hint=TOKEN_IDS)
    console.print(f"revoked node token {token_id}")
