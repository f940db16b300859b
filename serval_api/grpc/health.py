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
    "serval.inference.v1.InferenceNodeApi",
)


class HealthApi(health_pb2_grpc.HealthApiServicer):
    """Unauthenticated, like grpc.health.v1, so orchestrators can probe it."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def HealthCheck(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        report = await status.health(self._services)
        if not report.healthy:
            code = health_pb2.UNHEALTHY
        else:
            code = health_pb2.DEGRADED if report.degraded else health_pb2.HEALTHY
        return health_pb2.HealthCheckResponse(status=code, data=report.data, error=report.error)


async def add_health_services(server: grpc.aio.Server, services: Services) -> health.aio.HealthServicer:
    health_pb2_grpc.add_HealthApiServicer_to_server(HealthApi(services), server)
    standard = health.aio.HealthServicer()
    std_health_pb2_grpc.add_HealthServicer_to_server(standard, server)
    for name in ("", *SERVICE_NAMES):
        await standard.set(name, StdStatus.SERVING)
    return standard
