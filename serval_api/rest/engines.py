from __future__ import annotations

from fastapi import APIRouter, Response

from serval_api.rest import engine_routes
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.engine_routes import TRANSLATION
from serval_api.rest.protocol import (
    TranslationEngine,
    TranslationEngineConfig,
    TranslationEngineUpdateConfig,
    engine_dto,
)
from serval_api.service import engines

router = APIRouter(prefix="/api/v1/translation/engines", tags=["Translation Engines"])


async def create_engine(
    config: TranslationEngineConfig, services: ServicesDep, caller: CallerDep, response: Response
) -> TranslationEngine:
    return await engine_routes.create_engine(services, caller, config, response, TRANSLATION)


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


engine_routes.add_engine_routes(router, TRANSLATION, "", create_engine, update_engine)
