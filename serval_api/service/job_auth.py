"""Build jobs authenticate with the one-time token of their build (sent as a bearer token)."""

from __future__ import annotations

import hmac

from sqlalchemy import select

from serval_api.db.models import BuildRow
from serval_api.errors import NotFound, PermissionDenied, Unauthenticated
from serval_api.service.context import Services
from serval_api.service.keys import hash_secret

__all__ = ["authorize_job", "authorize_job_for_engine"]


async def authorize_job(
    services: Services, build_id: str, token: str | None, *, engine_id: str | None = None
) -> None:
    if not token:
        raise Unauthenticated("missing job token: send `authorization: Bearer <job token>`")
    async with services.db.session() as s:
        build = await s.get(BuildRow, build_id)
    if build is None:
        raise NotFound(f"build {build_id} not found")
    if build.job_token_hash is None or not hmac.compare_digest(build.job_token_hash, hash_secret(token)):
        raise PermissionDenied(f"the job token is not valid for build {build_id}")
    if engine_id is not None and engine_id != build.engine_id:
        raise PermissionDenied(f"build {build_id} does not belong to engine {engine_id}")


async def authorize_job_for_engine(services: Services, engine_id: str, token: str | None) -> str:
    """For the platform calls that name only an engine: the running build whose job holds `token`."""
    if not token:
        raise Unauthenticated("missing job token: send `authorization: Bearer <job token>`")
    async with services.db.session() as s:
        build = await s.scalar(
            select(BuildRow).where(
                BuildRow.engine_id == engine_id, BuildRow.job_token_hash == hash_secret(token)
            )
        )
    if build is None:
        raise PermissionDenied(f"the job token is not valid for engine {engine_id}")
    return build.id
