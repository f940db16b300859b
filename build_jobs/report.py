"""How a build job tells the API service what it is doing: Serval's TranslationPlatformApi."""

from __future__ import annotations

import logging

import grpc

from serval.translation.v1 import platform_pb2, platform_pb2_grpc

log = logging.getLogger(__name__)


class PlatformReporter:
    def __init__(self, api_address: str, build_id: str, job_token: str) -> None:
        self.build_id = build_id
        self._channel = grpc.insecure_channel(api_address)
        self._stub = platform_pb2_grpc.TranslationPlatformApiStub(self._channel)
        self._metadata = (("authorization", f"Bearer {job_token}"),)

    def started(self) -> None:
        self._stub.BuildStarted(
            platform_pb2.BuildStartedRequest(build_id=self.build_id), metadata=self._metadata
        )

    def progress(self, step: int, progress: float, message: str) -> None:
        log.info("build progress", extra={"build_id": self.build_id, "progress": progress, "detail": message})
        request = platform_pb2.UpdateBuildStatusRequest(
            build_id=self.build_id, step=step, progress=progress, message=message
        )
        self._stub.UpdateBuildStatus(request, metadata=self._metadata)

    def completed(self, corpus_size: int, confidence: float) -> None:
        request = platform_pb2.BuildCompletedRequest(
            build_id=self.build_id, corpus_size=corpus_size, confidence=confidence
        )
        self._stub.BuildCompleted(request, metadata=self._metadata)

    def faulted(self, message: str) -> None:
        request = platform_pb2.BuildFaultedRequest(build_id=self.build_id, message=message)
        self._stub.BuildFaulted(request, metadata=self._metadata)

    def close(self) -> None:
        self._channel.close()
