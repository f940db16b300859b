"""serval.health.v1.HealthApi and the standard grpc.health.v1 service."""

from __future__ import annotations

import grpc
from google.protobuf import empty_pb2
from grpc_health.v1 import health
from grpc_health.v1 import health_pb2_grpc as std_health_pb2_grpc
from grpc_health.v1.health_pb2 import HealthCheckResponse as StdStatus

from serval.health.v1 import health_pb2, health_pb2_grpc
from serval_api.service import Services, status

SERVICE_NAMES = (
    "serval.translation.v1.TranslationEngineApi",
    "serval.translation.v1.TranslationPlatformApi",
    "serval.word_alignment.v1.WordAlignmentEngineApi",
    "serval.word_alignment.v1.WordAlignmentPlatformApi",
    "serval.inference.v1.InferenceNodeApi",
)


_STATUS = {
    status.HealthStatus.HEALTHY: health_pb2.HEALTHY,
    status.HealthStatus.DEGRADED: health_pb2.DEGRADED,
    status.HealthStatus.UNHEALTHY: health_pb2.UNHEALTHY,
}


class HealthApi(health_pb2_grpc.HealthApiServicer):
    """Unauthenticated, like grpc.health.v1, so orchestrators can probe it. The REST report's entries
    travel flattened: `data[name]` is an entry's status, `data["name.key"]` its data."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def HealthCheck(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        report = await status.health(self._services)
        data: dict[str, str] = {}
        failures = []
        for name, entry in report.entries.items():
            data[name] = entry.status.label
            data.update({f"{name}.{key}": value for key, value in entry.data.items()})
            if entry.description:
                data[f"{name}.description"] = entry.description
            if entry.exception:
                failures.append(f"{name}: {entry.exception}")
        return health_pb2.HealthCheckResponse(
            status=_STATUS[report.status], data=data, error="; ".join(failures) or None
        )


async def add_health_services(server: grpc.aio.Server, services: Services) -> health.aio.HealthServicer:
    health_pb2_grpc.add_HealthApiServicer_to_server(HealthApi(services), server)
    standard = health.aio.HealthServicer()
    std_health_pb2_grpc.add_HealthServicer_to_server(standard, server)
    for name in ("", *SERVICE_NAMES):
        await standard.set(name, StdStatus.SERVING)
    return standard
