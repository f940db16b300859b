from __future__ import annotations

from fastapi import APIRouter, Response

from serval_api.rest import engine_routes
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.engine_routes import TRANSLATION
from serval_api.rest.protocol import TranslationBuild, TranslationBuildConfig

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])


async def start_build(
    engine_id: str,
    services: ServicesDep,
    caller: CallerDep,
    response: Response,
    config: TranslationBuildConfig | None = None,
) -> TranslationBuild:
    config = config or TranslationBuildConfig()
    return await engine_routes.start_build(services, caller, engine_id, response, TRANSLATION, config)


engine_routes.add_build_routes(router, TRANSLATION, start_build)
