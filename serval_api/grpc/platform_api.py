"""serval.translation.v1.TranslationPlatformApi: what build jobs report, each authorized by the
one-time job token of its build. RPCs not overridden here answer UNIMPLEMENTED."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.grpc.calls import bearer_token, run_call
from serval_api.service import Services, platform


class TranslationPlatformApi(platform_pb2_grpc.TranslationPlatformApiServicer):
    def __init__(self, services: Services) -> None:
        self._services = services

    async def _for_build(
        self, context: Context, build_id: str, report: Callable[[], Awaitable[None]]
    ) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            await platform.authorize_job(self._services, build_id, bearer_token(context))
            await report()
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def BuildStarted(
        self, request: platform_pb2.BuildStartedRequest, context: Context
    ) -> empty_pb2.Empty:
        return await self._for_build(
            context, request.build_id, lambda: platform.build_started(self._services, request.build_id)
        )

    async def UpdateBuildStatus(
        self, request: platform_pb2.UpdateBuildStatusRequest, context: Context
    ) -> empty_pb2.Empty:
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.update_build_status(
                self._services,
                request.build_id,
                step=request.step,
                progress=request.progress if request.HasField("progress") else None,
                message=request.message if request.HasField("message") else None,
                queue_depth=request.queue_depth if request.HasField("queue_depth") else None,
            ),
        )

    async def BuildCompleted(
        self, request: platform_pb2.BuildCompletedRequest, context: Context
    ) -> empty_pb2.Empty:
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.build_completed(
                self._services,
                request.build_id,
                corpus_size=request.corpus_size,
                confidence=request.confidence,
            ),
        )

    async def BuildFaulted(
        self, request: platform_pb2.BuildFaultedRequest, context: Context
    ) -> empty_pb2.Empty:
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.build_faulted(self._services, request.build_id, request.message),
        )

    async def BuildCanceled(
        self, request: platform_pb2.BuildCanceledRequest, context: Context
    ) -> empty_pb2.Empty:
        return await self._for_build(
            context, request.build_id, lambda: platform.build_canceled(self._services, request.build_id)
        )

    async def BuildRestarting(
        self, request: platform_pb2.BuildRestartingRequest, context: Context
    ) -> empty_pb2.Empty:
        return await self._for_build(
            context, request.build_id, lambda: platform.build_restarting(self._services, request.build_id)
        )
