from __future__ import annotations

from fastapi import APIRouter, Response, status

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import (
    TranslationEngine,
    TranslationEngineConfig,
    TranslationEngineUpdateConfig,
    engine_dto,
)
from serval_api.service import engines

router = APIRouter(prefix="/api/v1/translation/engines", tags=["Translation Engines"])


@router.get("", response_model=list[TranslationEngine], response_model_exclude_none=True)
async def list_engines(services: ServicesDep, caller: CallerDep) -> list[TranslationEngine]:
    base = services.settings.api_base_url
    return [engine_dto(base, e) for e in await engines.list_engines(services, caller)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TranslationEngine,
    response_model_exclude_none=True,
    responses=errors(405, 409),
)
async def create_engine(
    config: TranslationEngineConfig, services: ServicesDep, caller: CallerDep, response: Response
) -> TranslationEngine:
    engine = await engines.create_engine(
        services,
        caller,
        engine_type=config.type,
        source_language=config.source_language,
        target_language=config.target_language,
        name=config.name,
        is_model_persisted=config.is_model_persisted,
    )
    dto = engine_dto(services.settings.api_base_url, engine)
    response.headers["Location"] = dto.url
    return dto


@router.get("/{engine_id}", response_model=TranslationEngine, response_model_exclude_none=True)
async def get_engine(engine_id: str, services: ServicesDep, caller: CallerDep) -> TranslationEngine:
    return engine_dto(services.settings.api_base_url, await engines.get_engine(services, caller, engine_id))


@router.patch("/{engine_id}", response_model=TranslationEngine, response_model_exclude_none=True)
async def update_engine(
    engine_id: str, config: TranslationEngineUpdateConfig, services: ServicesDep, caller: CallerDep
) -> TranslationEngine:
    engine = await engines.update_engine_languages(
        services,
        caller,
        engine_id,
        source_language=config.source_language,
        target_language=config.target_language,
    )
    return engine_dto(services.settings.api_base_url, engine)


@router.delete("/{engine_id}", status_code=status.HTTP_200_OK)
async def delete_engine(engine_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await engines.delete_engine(services, caller, engine_id)
