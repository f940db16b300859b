from __future__ import annotations

from fastapi import APIRouter, Response

from serval_api.auth import READ_STATUS
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import DeploymentInfo, HealthReport, HealthReportEntry, LanguageInfo, Queue
from serval_api.service import deployment, status

router = APIRouter(prefix="/api/v1", tags=["Status"])


@router.get("/status/ping", response_model=HealthReport, response_model_exclude_none=True)
async def ping() -> HealthReport:
    """Liveness: answers while the process serves requests; no dependency is asked."""
    return _report(status.ping())


@router.get(
    "/status/health",
    response_model=HealthReport,
    response_model_exclude_none=True,
    responses={503: {"model": HealthReport, "description": "A dependency is unhealthy"}},
)
async def health(services: ServicesDep, caller: CallerDep, response: Response) -> HealthReport:
    """Every dependency's report; needs `read:status`, as Serval's (`status/ping` is the open probe)."""
    caller.require(READ_STATUS)
    report = await status.health(services)
    if not report.healthy:
        response.status_code = 503
    return _report(report)


@router.get("/status/deployment-info", response_model=DeploymentInfo)
async def deployment_info(services: ServicesDep) -> DeploymentInfo:
    info = deployment.deployment_info(services.settings)
    return DeploymentInfo(
        deployment_version=info.deployment_version, asp_net_core_environment=info.environment
    )


def _report(report: status.HealthReport) -> HealthReport:
    return HealthReport(
        status=report.status.label,
        total_duration=timespan(report.duration_s),
        results={
            name: HealthReportEntry(
                status=entry.status.label,
                duration=timespan(entry.duration_s),
                description=entry.description,
                exception=entry.exception,
                data=entry.data or None,
            )
            for name, entry in report.entries.items()
        },
    )


def timespan(seconds: float) -> str:
    """.NET's TimeSpan text (`[d.]hh:mm:ss.fffffff`), as ASP.NET Core health reports write durations."""
    ticks = max(0, round(seconds * 10_000_000))
    whole, fraction = divmod(ticks, 10_000_000)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{f'{days}.' if days else ''}{hours:02d}:{minutes:02d}:{secs:02d}.{fraction:07d}"


@router.get("/translation/engine-types/{engine_type}/queues", response_model=Queue, responses=errors(405))
async def queue(engine_type: str, services: ServicesDep, caller: CallerDep) -> Queue:
    kind, size = status.queue_size(services, caller, engine_type)
    return Queue(size=size, engine_type=kind)


@router.get(
    "/translation/engine-types/{engine_type}/languages/{language}",
    response_model=LanguageInfo,
    response_model_exclude_none=True,
    responses=errors(400, 404),
)
async def language_info(engine_type: str, language: str, caller: CallerDep) -> LanguageInfo:
    kind, info = status.language_info(caller, engine_type, language)
    return LanguageInfo(engine_type=kind, is_native=info.is_native, internal_code=info.code)
