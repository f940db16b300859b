"""Administration over the API: API keys, node tokens, nodes. Every function needs the `admin` scope.

`serval admin …` does the same on the database directly, so a fresh install is never locked out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from serval_api.auth import ADMIN, Caller
from serval_api.db.models import ApiKey, Node, NodeToken
from serval_api.db.nodes import list_nodes as list_node_rows
from serval_api.errors import InvalidArgument
from serval_api.service import keys
from serval_api.service.context import Services

_SCOPE = re.compile(r"^[a-z_]+(:[a-z_]+)?$")
MAX_NAME_CHARS = 200


async def create_api_key(
    services: Services, caller: Caller, owner: str, scopes: Iterable[str]
) -> tuple[ApiKey, str]:
    caller.require(ADMIN)
    wanted = list(scopes)
    if not wanted:
        raise InvalidArgument("scopes: name at least one scope")
    bad = [s for s in wanted if not _SCOPE.match(s)]
    if bad:
        raise InvalidArgument(f"scopes: not a scope name: {', '.join(map(repr, bad))}")
    if len(owner) > MAX_NAME_CHARS:
        raise InvalidArgument(f"owner: at most {MAX_NAME_CHARS} characters")
    return await keys.create_api_key(services.db, owner, wanted)


async def list_api_keys(services: Services, caller: Caller, owner: str | None = None) -> list[ApiKey]:
    caller.require(ADMIN)
    return await keys.list_api_keys(services.db, owner)


async def revoke_api_key(services: Services, caller: Caller, key_id: str) -> None:
    caller.require(ADMIN)
    await keys.revoke_api_key(services.db, key_id)


async def create_node_token(services: Services, caller: Caller, name: str) -> tuple[NodeToken, str]:
    caller.require(ADMIN)
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"name: 1 to {MAX_NAME_CHARS} characters")
    return await keys.create_node_token(services.db, name)


async def list_node_tokens(services: Services, caller: Caller) -> list[NodeToken]:
    caller.require(ADMIN)
    return await keys.list_node_tokens(services.db)


async def revoke_node_token(services: Services, caller: Caller, token_id: str) -> None:
    caller.require(ADMIN)
    await keys.revoke_node_token(services.db, token_id)


async def list_nodes(services: Services, caller: Caller) -> list[Node]:
    caller.require(ADMIN)
    return await list_node_rows(services.db)
