"""serval.translation.v1.TranslationPlatformApi: what build jobs report, each authorized by the
one-time job token of its build. RPCs not overridden here answer UNIMPLEMENTED."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from google.protobuf import empty_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from grpc.aio import ServicerContext as Context

from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval.word_alignment.v1 import platform_pb2 as word_alignment_platform_pb2
from serval_api.db.models.build_record import ExecutionData, Phase
from serval_api.errors import InvalidArgument, NotFound, PermissionDenied
from serval_api.grpc.calls import bearer_token, run_call
from serval_api.service import Services, job_auth, limits, platform, pretranslations


class TranslationPlatformApi(platform_pb2_grpc.TranslationPlatformApiServicer):
    def __init__(self, services: Services) -> None:
        self._services = services

    async def _for_build(
        self,
        context: Context,
        build_id: str,
        report: Callable[[], Awaitable[None]],
        *,
        engine_id: str | None = None,
    ) -> empty_pb2.Empty:
        """Authorize the job token for `build_id` (and, when named, that build's engine)."""

        async def call() -> empty_pb2.Empty:
            if not limits.can_be_id(build_id):
                raise NotFound(f"build {limits.shown(build_id)} not found")
            await job_auth.authorize_job(self._services, build_id, bearer_token(context), engine_id=engine_id)
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
                phases=[phase_from(phase, f"phases[{i}]") for i, phase in enumerate(request.phases)],
            ),
        )

    async def UpdateBuildExecutionData(
        self, request: platform_pb2.UpdateBuildExecutionDataRequest, context: Context
    ) -> empty_pb2.Empty:
        reported = execution_data_from(request.execution_data)
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.update_execution_data(self._services, request.build_id, reported),
            engine_id=request.engine_id,
        )

    async def UpdateTargetQuoteConvention(
        self, request: platform_pb2.UpdateTargetQuoteConventionRequest, context: Context
    ) -> empty_pb2.Empty:
        name = request.target_quote_convention if request.HasField("target_quote_convention") else None
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.update_target_quote_convention(self._services, request.build_id, name),
            engine_id=request.engine_id,
        )

    async def UpdateParallelCorpusAnalysis(
        self, request: platform_pb2.UpdateParallelCorpusAnalysisRequest, context: Context
    ) -> empty_pb2.Empty:
        analyses = [
            platform.AnalysisReport(
                corpus_id=entry.parallel_corpus_id,
                target_quote_convention=entry.target_quote_convention,
                source_quote_convention=entry.source_quote_convention
                if entry.HasField("source_quote_convention")
                else None,
            )
            for entry in request.parallel_corpus_analysis
        ]
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.update_parallel_corpus_analysis(self._services, request.build_id, analyses),
            engine_id=request.engine_id,
        )

    async def IncrementEngineCorpusSize(
        self, request: platform_pb2.IncrementEngineCorpusSizeRequest, context: Context
    ) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            token = bearer_token(context)
            if not limits.can_be_id(request.engine_id):
                raise PermissionDenied(
                    f"the job token is not valid for engine {limits.shown(request.engine_id)}"
                )
            build_id = await job_auth.authorize_job_for_engine(self._services, request.engine_id, token)
            await platform.increment_corpus_size(self._services, build_id, request.count)
            return empty_pb2.Empty()

        return await run_call(context, call)

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

    async def InsertPretranslations(
        self, request_iterator: AsyncIterable[platform_pb2.InsertPretranslationsRequest], context: Context
    ) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            rows = pretranslation_rows(request_iterator)
            await pretranslations.insert(self._services, bearer_token(context), rows)
            return empty_pb2.Empty()

        return await run_call(context, call)


async def pretranslation_rows(
    requests: AsyncIterable[platform_pb2.InsertPretranslationsRequest],
) -> AsyncIterator[pretranslations.PretranslationInsert]:
    async for request in requests:
        yield pretranslations.PretranslationInsert(
            engine_id=request.engine_id,
            corpus_id=request.corpus_id,
            text_id=request.text_id,
            translation=request.translation,
            source_refs=list(request.source_refs),
            target_refs=list(request.target_refs),
            confidence=request.confidence,
        )


_STAGES = {platform_pb2.PHASE_STAGE_TRAIN: "Train", platform_pb2.PHASE_STAGE_INFERENCE: "Inference"}


def phase_from(phase: platform_pb2.Phase, field: str) -> Phase:
    return Phase(
        stage=_STAGES.get(phase.stage, "Train"),
        step=phase.step if phase.HasField("step") else None,
        step_count=phase.step_count if phase.HasField("step_count") else None,
        started=_instant(f"{field}.started", phase.started) if phase.HasField("started") else None,
    )


def _instant(field: str, stamp: Timestamp) -> datetime:
    try:
        return stamp.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidArgument(
            f"{field}: not a timestamp between years 1 and 9999 ({stamp.seconds} s, {stamp.nanos} ns)"
        ) from None


_REPORTED = (
    "train_count",
    "pretranslate_count",
    "word_align_count",
    "warnings",
    "engine_source_language_tag",
    "engine_target_language_tag",
    "resolved_source_language",
    "resolved_target_language",
)
"""The `ExecutionData` fields a job reports: each platform's `ExecutionData` message carries some
of them under the same names (translation: the pretranslate count and resolved languages;
word alignment: the word-align count)."""


def execution_data_from(
    data: platform_pb2.ExecutionData | word_alignment_platform_pb2.ExecutionData,
) -> ExecutionData:
    """What the job set of either platform's `ExecutionData`: an empty string or list leaves what
    the API service recorded, so it is not among the fields set."""
    carried = data.DESCRIPTOR.fields_by_name
    reported = {name: getattr(data, name) for name in _REPORTED if name in carried}
    reported["warnings"] = list(reported["warnings"])
    return ExecutionData(**{name: value for name, value in reported.items() if value not in ("", [])})
