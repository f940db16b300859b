from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from serval_api.rest.build_corpora import pretranslate_entries, training_entries
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import TranslationBuild, TranslationBuildConfig, build_dto
from serval_api.service import build_start, build_transitions, builds

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])

MinRevision = Annotated[int | None, Query(alias="min-revision", ge=0)]


@router.get("/builds", response_model=list[TranslationBuild], response_model_exclude_none=True)
async def list_builds(engine_id: str, services: ServicesDep, caller: CallerDep) -> list[TranslationBuild]:
    base = services.settings.api_base_url
    return [build_dto(base, b) for b in await builds.list_builds(services, caller, engine_id)]


@router.post(
    "/builds",
    status_code=status.HTTP_201_CREATED,
    response_model=TranslationBuild,
    response_model_exclude_none=True,
    responses=errors(409),
)
async def start_build(
    engine_id: str,
    services: ServicesDep,
    caller: CallerDep,
    response: Response,
    config: TranslationBuildConfig | None = None,
) -> TranslationBuild:
    config = config or TranslationBuildConfig()
    build = await build_start.start_build(
        services,
        caller,
        engine_id,
        name=config.name,
        train_on=training_entries(config.train_on),
        pretranslate=pretranslate_entries(config.pretranslate),
        options=config.options,
        model=config.model,
    )
    dto = build_dto(services.settings.api_base_url, build)
    response.headers["Location"] = dto.url
    return dto


@router.get(
    "/builds/{build_id}",
    response_model=TranslationBuild,
    response_model_exclude_none=True,
    responses=errors(408),
)
async def get_build(
    engine_id: str, build_id: str, services: ServicesDep, caller: CallerDep, min_revision: MinRevision = None
) -> TranslationBuild:
    build = await builds.get_build(services, caller, engine_id, build_id, min_revision=min_revision)
    return build_dto(services.settings.api_base_url, build)


@router.get(
    "/current-build",
    response_model=TranslationBuild,
    response_model_exclude_none=True,
    responses={204: {"description": "No build is pending or running"}, **errors(408)},
)
async def current_build(
    engine_id: str, services: ServicesDep, caller: CallerDep, min_revision: MinRevision = None
) -> TranslationBuild | Response:
    build = await builds.current_build(services, caller, engine_id, min_revision=min_revision)
    if build is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return build_dto(services.settings.api_base_url, build)


@router.post(
    "/current-build/cancel",
    response_model=TranslationBuild,
    response_model_exclude_none=True,
    responses={204: {"description": "No build is pending or running"}},
)
async def cancel_current_build(
    engine_id: str, services: ServicesDep, caller: CallerDep
) -> TranslationBuild | Response:
    build = await build_transitions.cancel_current_build(services, caller, engine_id)
    if build is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return build_dto(services.settings.api_base_url, build)
