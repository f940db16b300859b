"""Bearer JWTs as client credentials: HS256 with a shared secret, RS256 with keys from a JWKS URL.

`sub` is the owner; scopes come from `scope` (space-separated, as OAuth 2 sends it) or a
`scopes` / `permissions` list (as Auth0 and others send them). The `admin` scope, and key
management's (`create:api_keys`, `read:api_keys`, `delete:api_keys`: whoever holds them can make a
key for any owner), count only with `auth.jwt_admin_scope_allowed`; otherwise they are dropped and
the token keeps its other scopes.
`aud` must name `auth.jwt_audience` when that is set (a token without `aud` is refused).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import jwt

from serval_api.auth import ADMIN, API_KEY_SCOPES, Caller
from serval_api.errors import Unauthenticated, Unavailable, concealed
from serval_common.settings import AuthSettings

log = logging.getLogger(__name__)

NOT_CONFIGURED = "JWT authentication is not configured"
_JWKS_TIMEOUT_S = 10
ADMINISTRATIVE_SCOPES = API_KEY_SCOPES | {ADMIN}


class JwtVerifier:
    def __init__(self, settings: AuthSettings) -> None:
        self._settings = settings
        self._jwks = (
            jwt.PyJWKClient(
                settings.jwks_url,
                cache_keys=True,
                lifespan=max(1, settings.jwks_cache_s),
                timeout=_JWKS_TIMEOUT_S,
            )
            if settings.jwks_url
            else None
        )

    @property
    def configured(self) -> bool:
        return bool(self._settings.jwt_secret) or self._jwks is not None

    async def __call__(self, token: str) -> Caller:
        if not self.configured:
            raise Unauthenticated(NOT_CONFIGURED)
        algorithm = _algorithm(token)
        key = await self._key(token, algorithm)
        claims = self._decode(token, key, algorithm)
        owner = claims.get("sub")
        if not isinstance(owner, str) or not owner.strip():
            raise Unauthenticated("invalid token: it has no `sub` claim")
        scopes = scopes_of(claims)
        administrative = scopes & ADMINISTRATIVE_SCOPES
        if administrative and not self._settings.jwt_admin_scope_allowed:
            log.warning(
                "a JWT's administrative scopes were dropped (auth.jwt_admin_scope_allowed is off)",
                extra={"owner": owner, "scopes": sorted(administrative)},
            )
            scopes -= ADMINISTRATIVE_SCOPES
        return Caller(owner=owner, scopes=scopes)

    async def _key(self, token: str, algorithm: str) -> Any:
        if algorithm == "HS256" and self._settings.jwt_secret:
            return self._settings.jwt_secret
        if algorithm == "RS256" and self._jwks is not None:
            try:
                signing_key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
            except jwt.PyJWKClientConnectionError as e:
                raise concealed(
                    Unavailable, "cannot fetch the JWKS to verify the token", e, log, retry_after_s=5
                ) from None
            except jwt.PyJWTError as e:
                raise Unauthenticated(f"invalid token: no matching signing key ({e})") from None
            return signing_key.key
        raise Unauthenticated(f"invalid token: algorithm {algorithm} is not accepted")

    def _decode(self, token: str, key: Any, algorithm: str) -> dict[str, Any]:
        s = self._settings
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=s.jwt_audience,
                issuer=s.jwt_issuer,
                leeway=s.jwt_leeway_s,
                options={"verify_aud": s.jwt_audience is not None, "require": ["exp", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("invalid token: it has expired") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("invalid token: bad signature") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated(f"invalid token: the audience is not {s.jwt_audience!r}") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated(f"invalid token: the issuer is not {s.jwt_issuer!r}") from None
        except jwt.MissingRequiredClaimError as e:
            raise Unauthenticated(f"invalid token: it has no `{e.claim}` claim") from None
        except jwt.PyJWTError as e:
            raise Unauthenticated(f"invalid token: {e}") from None
        return claims


def _algorithm(token: str) -> str:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Unauthenticated("invalid token: not a JWT") from None
    algorithm = header.get("alg")
    return algorithm if isinstance(algorithm, str) else ""


def scopes_of(claims: dict[str, Any]) -> frozenset[str]:
    found: set[str] = set()
    for name in ("scope", "scopes", "permissions"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str) and item)
    return frozenset(found)
