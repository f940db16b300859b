"""How a build job tells the API service what it is doing: Serval's TranslationPlatformApi."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import grpc

from serval.translation.v1 import platform_pb2, platform_pb2_grpc

log = logging.getLogger(__name__)


Stage = Literal["Train", "Inference"]


@dataclass
class Phase:
    """Serval's build phase: a stage with its step count, started when its first step ran."""

    stage: Stage
    started: datetime
    step: int = 0
    step_count: int = 0

    def to_proto(self) -> platform_pb2.Phase:
        phase = platform_pb2.Phase(
            stage=platform_pb2.PHASE_STAGE_TRAIN
            if self.stage == "Train"
            else platform_pb2.PHASE_STAGE_INFERENCE,
            step=self.step,
            step_count=self.step_count,
        )
        phase.started.FromDatetime(self.started)
        return phase


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

    def progress(self, step: int, progress: float, message: str, phases: Sequence[Phase] = ()) -> None:
        log.info("build progress", extra={"build_id": self.build_id, "progress": progress, "detail": message})
        request = platform_pb2.UpdateBuildStatusRequest(
            build_id=self.build_id,
            step=step,
            progress=progress,
            message=message,
            phases=[phase.to_proto() for phase in phases],
        )
        self._stub.UpdateBuildStatus(request, metadata=self._metadata)

    def execution_data(self, engine_id: str, data: platform_pb2.ExecutionData) -> None:
        request = platform_pb2.UpdateBuildExecutionDataRequest(
            engine_id=engine_id, build_id=self.build_id, execution_data=data
        )
        self._stub.UpdateBuildExecutionData(request, metadata=self._metadata)

    def completed(self, corpus_size: int, confidence: float) -> None:
        request = platform_pb2.BuildCompletedRequest(
            build_id=self.build_id, corpus_size=corpus_size, confidence=confidence
        )
        self._stub.BuildCompleted(request, metadata=self._metadata)

    def canceled(self) -> None:
        request = platform_pb2.BuildCanceledRequest(build_id=self.build_id)
        self._stub.BuildCanceled(request, metadata=self._metadata)

    def faulted(self, message: str) -> None:
        request = platform_pb2.BuildFaultedRequest(build_id=self.build_id, message=message)
        self._stub.BuildFaulted(request, metadata=self._metadata)

    def insert_pretranslations(self, engine_id: str, rows: Iterable[dict[str, Any]]) -> int:
        """Stream pretranslated rows (`pretranslate.trg.json`'s shape) over InsertPretranslations."""
        sent = 0

        def requests() -> Iterator[platform_pb2.InsertPretranslationsRequest]:
            nonlocal sent
            for row in rows:
                sent += 1
                yield platform_pb2.InsertPretranslationsRequest(
                    engine_id=engine_id,
                    corpus_id=row["corpusId"],
                    text_id=row["textId"],
                    source_refs=row.get("sourceRefs", []),
                    target_refs=row.get("targetRefs", []),
                    translation=row.get("translation", ""),
                    confidence=row.get("confidence", 0.0),
                )

        self._stub.InsertPretranslations(requests(), metadata=self._metadata)
        log.info(
            "pretranslations sent", extra={"build_id": self.build_id, "engine_id": engine_id, "rows": sent}
        )
        return sent

    def close(self) -> None:
        self._channel.close()
