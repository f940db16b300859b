"""Who is calling, and what they may do.

Credentials are an API key (`X-API-Key` header / `x-api-key` metadata) or a JWT
(`Authorization: Bearer …` / `authorization` metadata, see `jwt_verifier`). Node tokens and job
tokens travel as bearer values too, but only on their own services: here they are no credential.

Scope policy: translate is a read (`read:translation_engines`); starting or canceling a build
changes the engine's model, so it needs `update:translation_engines`. Webhooks have Serval's own
scopes (`read:hooks`, `create:hooks`, `delete:hooks`). `admin` grants everything.

Each endpoint answers to Serval's scope for it, so a key made with Serval's scope list works where
Serval's does, and to this service's older scope where it had its own (keys made before keep
working): `/corpora` to the files scopes (Serval's) or the `*:corpora` scopes; the word-alignment
APIs to the `*:word_alignment_engines` scopes (Serval's) or the translation-engine scopes
(`Caller.on_word_alignment`); `GET /status/health` to `read:status`.

Serval 1.20's key management (`/api/v1/api-keys`) has the scopes `create:api_keys`,
`read:api_keys` and `delete:api_keys`. Whoever holds one can make a key for any owner with any
grantable scope, so they are an administrator's: an API key never confers them (they are dropped
when the key authenticates, as Serval does), a JWT's count only where its `admin` scope would
(`auth.jwt_admin_scope_allowed`), and `admin` grants them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from serval_api.errors import MissingScope, Unauthenticated
from serval_common.core import Sender, WorkClass

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
CREATE_WORD_ALIGNMENT_ENGINES = "create:word_alignment_engines"
READ_WORD_ALIGNMENT_ENGINES = "read:word_alignment_engines"
UPDATE_WORD_ALIGNMENT_ENGINES = "update:word_alignment_engines"
DELETE_WORD_ALIGNMENT_ENGINES = "delete:word_alignment_engines"
READ_STATUS = "read:status"
READ_HOOKS = "read:hooks"
CREATE_HOOKS = "create:hooks"
DELETE_HOOKS = "delete:hooks"
CREATE_API_KEYS = "create:api_keys"
READ_API_KEYS = "read:api_keys"
DELETE_API_KEYS = "delete:api_keys"
ADMIN = "admin"

ALL_ENGINE_SCOPES = (READ_ENGINES, CREATE_ENGINES, UPDATE_ENGINES, DELETE_ENGINES)
ALL_FILE_SCOPES = (READ_FILES, CREATE_FILES, UPDATE_FILES, DELETE_FILES)
ALL_CORPUS_SCOPES = (READ_CORPORA, CREATE_CORPORA, UPDATE_CORPORA, DELETE_CORPORA)
ALL_HOOK_SCOPES = (READ_HOOKS, CREATE_HOOKS, DELETE_HOOKS)
ALL_WORD_ALIGNMENT_SCOPES = (
    READ_WORD_ALIGNMENT_ENGINES,
    CREATE_WORD_ALIGNMENT_ENGINES,
    UPDATE_WORD_ALIGNMENT_ENGINES,
    DELETE_WORD_ALIGNMENT_ENGINES,
)
ALL_SCOPES = (
    *ALL_ENGINE_SCOPES,
    *ALL_WORD_ALIGNMENT_SCOPES,
    *ALL_FILE_SCOPES,
    *ALL_CORPUS_SCOPES,
    *ALL_HOOK_SCOPES,
    READ_STATUS,
)
API_KEY_SCOPES = frozenset({CREATE_API_KEYS, READ_API_KEYS, DELETE_API_KEYS})
"""Key management: an administrator's (see the module docstring)."""
WORD_ALIGNMENT_GRANTS = {
    READ_WORD_ALIGNMENT_ENGINES: READ_ENGINES,
    CREATE_WORD_ALIGNMENT_ENGINES: CREATE_ENGINES,
    UPDATE_WORD_ALIGNMENT_ENGINES: UPDATE_ENGINES,
    DELETE_WORD_ALIGNMENT_ENGINES: DELETE_ENGINES,
}
"""On the word-alignment APIs, Serval's word-alignment scope → the engine scope the service
functions check (shared with translation engines; those functions see only word-alignment
engines there)."""
GRANTABLE_SCOPES = frozenset(ALL_SCOPES)
"""What `POST /api-keys` may grant: every scope but key management's (Serval's `Scopes.Grantable`)
and this service's own `admin`, which only `serval admin api-key` and `/admin/api-keys` hand out."""

KNOWN_SCOPES = GRANTABLE_SCOPES | API_KEY_SCOPES | {ADMIN}
"""Every scope a key may hold: what an administrator (`serval admin api-key`, `/admin/api-keys`)
may grant. A name outside it would authorize nothing, so it is refused rather than stored."""

API_KEY_HEADER = "X-API-Key"
API_KEY_METADATA = "x-api-key"


@dataclass(frozen=True)
class KeyLimits:
    """An administrator's overrides of one API key's limits (`LimitSettings`); None: the setting.
    0 lifts the limit for the key."""

    translate_per_minute: int | None = None
    build_starts_per_hour: int | None = None
    concurrent_long_polls: int | None = None
    max_chars_per_request: int | None = None
    """The longest segment or text one request may send (in place of `api.max_segment_chars` and
    `api.max_text_chars`); at least 1."""

    @classmethod
    def of(cls, stored: dict[str, object] | None) -> KeyLimits:
        """From an `api_keys.limits` value; fields it does not know are ignored."""
        if not stored:
            return NO_OVERRIDES
        return cls(
            **{
                name: value
                for name in KEY_LIMIT_FIELDS
                if isinstance(value := stored.get(name), int) and not isinstance(value, bool)
            }
        )

    def stored(self) -> dict[str, int] | None:
        values = {name: value for name in KEY_LIMIT_FIELDS if (value := getattr(self, name)) is not None}
        return values or None


KEY_LIMIT_FIELDS = (
    "translate_per_minute",
    "build_starts_per_hour",
    "concurrent_long_polls",
    "max_chars_per_request",
)
NO_OVERRIDES = KeyLimits()


@dataclass(frozen=True)
class Caller:
    owner: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    engine_id: str | None = None
    """The engine a key is bound to: the dialects that name no engine (SIL Converters,
    LibreTranslate) translate with it; None: with the public base model."""
    expires_at: datetime | None = None
    """When the credential stops being valid (an API key's `expiresAt`); None: it does not expire."""
    key_id: str | None = None
    """The API key's id; None for a JWT."""
    limits: KeyLimits = NO_OVERRIDES
    """The key's overrides of the per-key limits."""

    def has(self, scope: str) -> bool:
        return scope in self.scopes or ADMIN in self.scopes

    def require(self, scope: str, *alternatives: str) -> None:
        """`scope`, or any of `alternatives` (this service's older scope for the same call)."""
        if not any(self.has(s) for s in (scope, *alternatives)):
            raise MissingScope(scope, *alternatives)

    def sender(self, work_class: WorkClass = WorkClass.INTERACTIVE) -> Sender:
        """This caller as the work items it causes name it to a node (whose batcher takes turns
        between owners)."""
        return Sender(self.owner, self.key_id or "", work_class)

    def on_word_alignment(self) -> Caller:
        """This caller on the word-alignment APIs, where Serval's `*:word_alignment_engines` scopes
        grant what the translation-engine scopes grant (which keep granting it there too)."""
        granted = frozenset(WORD_ALIGNMENT_GRANTS[s] for s in self.scopes if s in WORD_ALIGNMENT_GRANTS)
        return self if granted <= self.scopes else replace(self, scopes=self.scopes | granted)


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
