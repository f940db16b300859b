"""Who is calling, and what they may do.

Credentials are API keys today (`X-API-Key` header / `x-api-key` metadata). A JWT verifier plugs in
at `CredentialVerifier`: it maps the `authorization: Bearer …` value to a `Caller` the same way.

Scope policy: translate is a read (`read:translation_engines`); starting or canceling a build
changes the engine's model, so it needs `update:translation_engines`. `admin` grants everything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from serval_api.errors import PermissionDenied, Unauthenticated

READ_ENGINES = "read:translation_engines"
CREATE_ENGINES = "create:translation_engines"
UPDATE_ENGINES = "update:translation_engines"
DELETE_ENGINES = "delete:translation_engines"
ADMIN = "admin"

ALL_ENGINE_SCOPES = (READ_ENGINES, CREATE_ENGINES, UPDATE_ENGINES, DELETE_ENGINES)

API_KEY_HEADER = "X-API-Key"
API_KEY_METADATA = "x-api-key"


@dataclass(frozen=True)
class Caller:
    owner: str
    scopes: frozenset[str] = field(default_factory=frozenset)

    def has(self, scope: str) -> bool:
        return scope in self.scopes or ADMIN in self.scopes

    def require(self, scope: str) -> None:
        if not self.has(scope):
            raise PermissionDenied(f"this call needs the scope {scope!r}")


CredentialVerifier = Callable[[str], Awaitable[Caller | None]]


async def authenticate(api_key: str | None, verify_api_key: CredentialVerifier) -> Caller:
    if not api_key:
        raise Unauthenticated(f"missing credentials: send an API key in the {API_KEY_HEADER} header")
    caller = await verify_api_key(api_key)
    if caller is None:
        raise Unauthenticated("invalid or revoked API key")
    return caller
