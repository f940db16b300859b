from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import TranslationBuild, build_dto
from serval_api.service import builds_feed

router = APIRouter(prefix="/api/v1/translation/builds", tags=["Translation Builds"])

_DATE_HELP = "ISO-8601, e.g. `2024-05-01 12:00:00Z` (the form Serval's clients send); no offset means UTC"
CreatedAfter = Annotated[str | None, Query(alias="created-after", description=_DATE_HELP)]
FinishedAfter = Annotated[
    str | None,
    Query(
        alias="finished-after",
        description="The id of one of your builds: the answer is the next build to finish after it "
        "(as Serval); omitted, or an id of no build of yours: the next to finish from now. Also "
        f"accepted (this service's extension): a date-time, {_DATE_HELP}",
    ),
]


@router.get(
    "",
    summary="The caller's builds created after `created-after` (all of them without it), oldest first",
    response_model=list[TranslationBuild],
    response_model_exclude_none=True,
    responses=errors(400),
)
async def builds_created_after(
    services: ServicesDep, caller: CallerDep, created_after: CreatedAfter = None
) -> list[TranslationBuild]:
    base = services.settings.api_base_url
    return [
        build_dto(base, b) for b in await builds_feed.builds_created_after(services, caller, created_after)
    ]


@router.get(
    "/next-finished",
    summary="The caller's next build to finish after build `finished-after` (or a date-time, or now); "
    "waits for one, then 408",
    response_model=TranslationBuild,
    response_model_exclude_none=True,
    responses=errors(400, 408),
)
async def next_finished_build(
    services: ServicesDep, caller: CallerDep, finished_after: FinishedAfter = None
) -> TranslationBuild:
    build = await builds_feed.next_finished(services, caller, finished_after)
    return build_dto(services.settings.api_base_url, build)
