"""How a build job tells the API service what it is doing: Serval's TranslationPlatformApi.

A job can outlive the API service it reports to (a ClearML task on another machine keeps running
while the API service restarts), so every platform call goes through `PlatformReporter._call`: it
retries transient errors (`TRANSIENT_CODES`) with exponential backoff and jitter, each attempt
with its own deadline, until `RetryPolicy.budget_s` is spent, and fails fast on anything else. Every
report is safe to repeat: the API service ignores reports for a finished build, and an
InsertPretranslations stream, re-sent whole, replaces the rows the build's earlier streams left.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import grpc

from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval.word_alignment.v1 import common_pb2 as wa_common_pb2
from serval.word_alignment.v1 import platform_pb2 as wa_platform_pb2
from serval.word_alignment.v1 import platform_pb2_grpc as wa_platform_pb2_grpc
from serval_common.tls import client_channel

log = logging.getLogger(__name__)

T = TypeVar("T")

Stage = Literal["Train", "Inference"]

TRANSIENT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
"""Errors that may clear up if the call is made again: the API service restarting, slow or
overloaded. Anything else (a refused token, an unknown build, a bad request) would only repeat."""


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


@dataclass(frozen=True)
class RetryPolicy:
    budget_s: float = 120.0
    """No retry starts once this long has passed since the call's first attempt."""
    call_timeout_s: float = 30.0
    """The deadline of one attempt of a unary call."""
    stream_timeout_s: float = 600.0
    """The deadline of one attempt of the InsertPretranslations stream, which carries every row."""
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 5.0
    """Also the channel's longest reconnect backoff, so a call soon finds a restarted API service."""

    def backoff(self, retry: int) -> float:
        """The pause before retry number `retry` (0-based): doubling, capped, jittered to between
        half and all of it so that jobs cut off together do not return together."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * 2**retry)
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class WordAlignmentRow:
    """One aligned sentence pair of a word-alignment build; `alignment` holds
    (source index, target index, score) triples, the score a probability."""

    corpus_id: str
    text_id: str
    source_refs: list[str]
    target_refs: list[str]
    source_tokens: list[str]
    target_tokens: list[str]
    alignment: list[tuple[int, int, float]]


class PlatformReporter:
    """The job's platform client. Each call blocks until the API service took the report, or
    raises the call's `grpc.RpcError`: at once for a permanent error, after `policy.budget_s` of
    retries for a transient one."""

    def __init__(
        self,
        api_address: str,
        build_id: str,
        job_token: str,
        policy: RetryPolicy | None = None,
        *,
        ca_file: str | Path | None = None,
        server_name: str | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """`ca_file`: PEM certificates to trust, dialing with TLS (`jobs.tls_ca_file`); None dials
        in plaintext. `server_name`: the name the API service's certificate must carry. `stop`
        set (the job was canceled) ends retrying: a job whose API service died with SIGKILL gets
        SIGTERM and must exit, not wait out the retry budget."""
        self.build_id = build_id
        self._stop = stop
        self.policy = policy or RetryPolicy()
        backoff_ms = int(self.policy.max_backoff_s * 1000)
        # gRPC's own reconnect backoff grows to 120 s by default; capped, the channel finds a
        # restarted API service within a few seconds of its return.
        self._channel = client_channel(
            api_address,
            ca_file,
            server_name,
            options=[
                ("grpc.initial_reconnect_backoff_ms", min(1000, backoff_ms)),
                ("grpc.max_reconnect_backoff_ms", backoff_ms),
            ],
        )
        self._stub = platform_pb2_grpc.TranslationPlatformApiStub(self._channel)
        self._wa_stub = wa_platform_pb2_grpc.WordAlignmentPlatformApiStub(self._channel)
        self._metadata = (("authorization", f"Bearer {job_token}"),)

    def started(self) -> None:
        self._unary("BuildStarted", platform_pb2.BuildStartedRequest(build_id=self.build_id))

    def progress(self, step: int, progress: float, message: str, phases: Sequence[Phase] = ()) -> None:
        log.info("build progress", extra={"build_id": self.build_id, "progress": progress, "detail": message})
        request = platform_pb2.UpdateBuildStatusRequest(
            build_id=self.build_id,
            step=step,
            progress=progress,
            message=message,
            phases=[phase.to_proto() for phase in phases],
        )
        self._unary("UpdateBuildStatus", request)

    def execution_data(self, engine_id: str, data: platform_pb2.ExecutionData) -> None:
        request = platform_pb2.UpdateBuildExecutionDataRequest(
            engine_id=engine_id, build_id=self.build_id, execution_data=data
        )
        self._unary("UpdateBuildExecutionData", request)

    def target_quote_convention(self, engine_id: str, convention: str | None) -> None:
        request = platform_pb2.UpdateTargetQuoteConventionRequest(engine_id=engine_id, build_id=self.build_id)
        if convention:
            request.target_quote_convention = convention
        self._unary("UpdateTargetQuoteConvention", request)

    def corpus_analysis(self, engine_id: str, conventions: Sequence[tuple[str, str | None]]) -> None:
        """(corpus id, its target's convention or None) for each corpus the build exported."""
        request = platform_pb2.UpdateParallelCorpusAnalysisRequest(
            engine_id=engine_id,
            build_id=self.build_id,
            parallel_corpus_analysis=[
                platform_pb2.ParallelCorpusAnalysisResult(
                    parallel_corpus_id=corpus_id, target_quote_convention=convention or ""
                )
                for corpus_id, convention in conventions
            ],
        )
        self._unary("UpdateParallelCorpusAnalysis", request)

    def completed(self, corpus_size: int, confidence: float) -> None:
        request = platform_pb2.BuildCompletedRequest(
            build_id=self.build_id, corpus_size=corpus_size, confidence=confidence
        )
        self._unary("BuildCompleted", request)

    def canceled(self) -> None:
        self._unary("BuildCanceled", platform_pb2.BuildCanceledRequest(build_id=self.build_id))

    def faulted(self, message: str) -> None:
        self._unary("BuildFaulted", platform_pb2.BuildFaultedRequest(build_id=self.build_id, message=message))

    def insert_pretranslations(self, engine_id: str, rows: Sequence[dict[str, Any]]) -> int:
        """Stream pretranslated rows (`pretranslate.trg.json`'s shape) over InsertPretranslations.
        A retry sends the whole stream again; the API service then replaces what the broken
        attempt stored (`serval_api.service.pretranslations.insert`)."""

        def requests() -> Iterator[platform_pb2.InsertPretranslationsRequest]:
            for row in rows:
                yield platform_pb2.InsertPretranslationsRequest(
                    engine_id=engine_id,
                    corpus_id=row["corpusId"],
                    text_id=row["textId"],
                    source_refs=row.get("sourceRefs", []),
                    target_refs=row.get("targetRefs", []),
                    translation=row.get("translation", ""),
                    confidence=row.get("confidence", 0.0),
                )

        self._call(
            "InsertPretranslations",
            lambda: self._stub.InsertPretranslations(
                requests(), metadata=self._metadata, timeout=self.policy.stream_timeout_s
            ),
        )
        log.info(
            "pretranslations sent",
            extra={"build_id": self.build_id, "engine_id": engine_id, "rows": len(rows)},
        )
        return len(rows)

    def insert_word_alignments(self, engine_id: str, rows: Sequence[WordAlignmentRow]) -> int:
        """Stream aligned rows over the word-alignment platform's InsertWordAlignments. Build ids
        are shared by both platform APIs, so the build's status calls stay on this reporter's
        translation platform. A retry sends the whole stream again, like pretranslations."""

        def requests() -> Iterator[wa_platform_pb2.InsertWordAlignmentsRequest]:
            for row in rows:
                yield wa_platform_pb2.InsertWordAlignmentsRequest(
                    engine_id=engine_id,
                    corpus_id=row.corpus_id,
                    text_id=row.text_id,
                    source_refs=row.source_refs,
                    target_refs=row.target_refs,
                    source_tokens=row.source_tokens,
                    target_tokens=row.target_tokens,
                    alignment=[
                        wa_common_pb2.AlignedWordPair(source_index=s, target_index=t, score=score)
                        for s, t, score in row.alignment
                    ],
                )

        self._call(
            "InsertWordAlignments",
            lambda: self._wa_stub.InsertWordAlignments(
                requests(), metadata=self._metadata, timeout=self.policy.stream_timeout_s
            ),
        )
        log.info(
            "word alignments sent",
            extra={"build_id": self.build_id, "engine_id": engine_id, "rows": len(rows)},
        )
        return len(rows)

    def word_alignment_execution_data(self, engine_id: str, data: wa_platform_pb2.ExecutionData) -> None:
        """UpdateBuildExecutionData of the word-alignment platform (it has `word_align_count`)."""
        request = wa_platform_pb2.UpdateBuildExecutionDataRequest(
            engine_id=engine_id, build_id=self.build_id, execution_data=data
        )
        self._call(
            "UpdateBuildExecutionData",
            lambda: self._wa_stub.UpdateBuildExecutionData(
                request, metadata=self._metadata, timeout=self.policy.call_timeout_s
            ),
        )

    def close(self) -> None:
        self._channel.close()

    def _unary(self, rpc: str, request: Any) -> None:
        method = getattr(self._stub, rpc)
        self._call(rpc, lambda: method(request, metadata=self._metadata, timeout=self.policy.call_timeout_s))

    def _stopped(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _call(self, rpc: str, attempt: Callable[[], T]) -> T:
        """The one retry loop: `attempt` again after a transient error, pausing between tries,
        until the retry budget is spent; any other error is raised at once."""
        began = time.monotonic()
        retries = 0
        while True:
            try:
                result = attempt()
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                elapsed = time.monotonic() - began
                pause = self.policy.backoff(retries)
                extra = {
                    "build_id": self.build_id,
                    "rpc": rpc,
                    "code": code.name if code is not None else "unknown",
                    "error": exc.details() if isinstance(exc, grpc.Call) else str(exc),
                    "retries": retries,
                    "elapsed_s": round(elapsed, 1),
                }
                if code not in TRANSIENT_CODES or self._stopped():
                    raise
                if elapsed + pause > self.policy.budget_s:
                    log.error("platform call failed; retry budget spent", extra=extra)
                    raise
                retries += 1
                log.warning(
                    "platform call failed; retrying",
                    extra={**extra, "retry": retries, "pause_s": round(pause, 2)},
                )
                if self._stop is not None:
                    self._stop.wait(pause)
                else:
                    time.sleep(pause)
                continue
            if retries:
                log.info(
                    "platform call succeeded after retries",
                    extra={
                        "build_id": self.build_id,
                        "rpc": rpc,
                        "retries": retries,
                        "elapsed_s": round(time.monotonic() - began, 1),
                    },
                )
            return result
