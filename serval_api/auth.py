"""Who is calling, and what they may do.

Credentials are an API key (`X-API-Key` header / `x-api-key` metadata) or a JWT
(`Authorization: Bearer …` / `authorization` metadata, see `jwt_verifier`). Node tokens and job
tokens travel as bearer values too, but only on their own services: here they are no credential.

Scope policy: translate is a read (`read:translation_engines`); starting or canceling a build
changes the engine's model, so it needs `update:translation_engines`. Webhooks have Serval's own
scopes (`read:hooks`, `create:hooks`, `delete:hooks`). `admin` grants everything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from serval_api.errors import PermissionDenied, Unauthenticated

READ_ENGINES = "read:translation_engines"
CREATE_ENGINES = "create:translation_engines"
UPDATE_ENGINES = "update:translation_engines"
DELETE_ENGINES = "delete:translation_engines"
READ_FILES = "read:files"
CREATE_FILES = "create:files"
UPDATE_FILES = "update:files"
DELETE_FILES = "delete:files"
READ_CORPORA = "read:corpora"
CREATE_CORPORA = "create:corpora"
UPDATE_CORPORA = "update:corpora"
DELETE_CORPORA = "delete:corpora"
READ_HOOKS = "read:hooks"
CREATE_HOOKS = "create:hooks"
DELETE_HOOKS = "delete:hooks"
ADMIN = "admin"

ALL_ENGINE_SCOPES = (READ_ENGINES, CREATE_ENGINES, UPDATE_ENGINES, DELETE_ENGINES)
ALL_FILE_SCOPES = (READ_FILES, CREATE_FILES, UPDATE_FILES, DELETE_FILES)
ALL_CORPUS_SCOPES = (READ_CORPORA, CREATE_CORPORA, UPDATE_CORPORA, DELETE_CORPORA)
ALL_HOOK_SCOPES = (READ_HOOKS, CREATE_HOOKS, DELETE_HOOKS)
ALL_SCOPES = (*ALL_ENGINE_SCOPES, *ALL_FILE_SCOPES, *ALL_CORPUS_SCOPES, *ALL_HOOK_SCOPES)

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
BearerVerifier = Callable[[str], Awaitable[Caller]]


def bearer_value(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None for any other scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


async def authenticate(
    api_key: str | None,
    verify_api_key: CredentialVerifier,
    bearer: str | None = None,
    verify_bearer: BearerVerifier | None = None,
) -> Caller:
    """An API key wins over a bearer token; `verify_bearer` raises `Unauthenticated` itself."""
    if api_key:
        caller = await verify_api_key(api_key)
        if caller is None:
            raise Unauthenticated("invalid or revoked API key")
        return caller
    if bearer and verify_bearer is not None:
        return await verify_bearer(bearer)
    raise Unauthenticated(
        f"missing credentials: send an API key in the {API_KEY_HEADER} header "
        "or a JWT as `Authorization: Bearer <token>`"
    )
