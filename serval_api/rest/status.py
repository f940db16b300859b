from __future__ import annotations

from fastapi import APIRouter, Response

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import HealthReport, LanguageInfo, Queue
from serval_api.service import status

router = APIRouter(prefix="/api/v1", tags=["Status"])


@router.get("/status/ping", response_model=HealthReport)
async def ping() -> HealthReport:
    return HealthReport(status="Healthy")


@router.get(
    "/status/health",
    response_model=HealthReport,
    response_model_exclude_none=True,
    responses={503: {"model": HealthReport, "description": "The API service is unhealthy"}},
)
async def health(services: ServicesDep, caller: CallerDep, response: Response) -> HealthReport:
    report = await status.health(services)
    if not report.healthy:
        response.status_code = 503
    results: dict[str, object] = dict(report.data)
    if report.error:
        results["error"] = report.error
    return HealthReport(status=report.status, results=results)


@router.get("/translation/engine-types/{engine_type}/queues", response_model=Queue, responses=errors(405))
async def queue(engine_type: str, services: ServicesDep, caller: CallerDep) -> Queue:
    kind, size = status.queue_size(services, caller, engine_type)
    return Queue(size=size, engine_type=kind)


@router.get(
    "/translation/engine-types/{engine_type}/languages/{language}",
    response_model=LanguageInfo,
    response_model_exclude_none=True,
    responses=errors(405),
)
async def language_info(engine_type: str, language: str, caller: CallerDep) -> LanguageInfo:
    kind, info = status.language_info(caller, engine_type, language)
    return LanguageInfo(engine_type=kind, is_native=info.is_native, internal_code=info.code)
