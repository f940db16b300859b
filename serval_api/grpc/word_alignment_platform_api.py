"""serval.word_alignment.v1.WordAlignmentPlatformApi: what word-alignment build jobs report. Its
build RPCs carry the same fields as TranslationPlatformApi's and reach the same build services,
authorized by the build's job token, so they are that servicer's methods; only the execution data
(`word_align_count`) and the stream of aligned pairs (InsertWordAlignments) are its own."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.word_alignment.v1 import platform_pb2, platform_pb2_grpc
from serval_api.grpc.calls import bearer_token, run_call
from serval_api.grpc.platform_api import TranslationPlatformApi
from serval_api.service import platform, word_alignment


class WordAlignmentPlatformApi(TranslationPlatformApi, platform_pb2_grpc.WordAlignmentPlatformApiServicer):
    """BuildStarted, UpdateBuildStatus, BuildCompleted, BuildFaulted, BuildCanceled,
    BuildRestarting and IncrementEngineCorpusSize are TranslationPlatformApi's."""

    async def UpdateBuildExecutionData(
        self, request: platform_pb2.UpdateBuildExecutionDataRequest, context: Context
    ) -> empty_pb2.Empty:
        data = execution_data_dict(request.execution_data)
        return await self._for_build(
            context,
            request.build_id,
            lambda: platform.update_execution_data(self._services, request.build_id, data),
            engine_id=request.engine_id,
        )

    async def InsertWordAlignments(
        self, request_iterator: AsyncIterable[platform_pb2.InsertWordAlignmentsRequest], context: Context
    ) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            await word_alignment.insert(
                self._services, bearer_token(context), word_alignment_rows(request_iterator)
            )
            return empty_pb2.Empty()

        return await run_call(context, call)


async def word_alignment_rows(
    requests: AsyncIterable[platform_pb2.InsertWordAlignmentsRequest],
) -> AsyncIterator[word_alignment.WordAlignmentRow]:
    async for request in requests:
        yield word_alignment.WordAlignmentRow(
            engine_id=request.engine_id,
            corpus_id=request.corpus_id,
            text_id=request.text_id,
            source_refs=list(request.source_refs),
            target_refs=list(request.target_refs),
            source_tokens=list(request.source_tokens),
            target_tokens=list(request.target_tokens),
            alignment=[(a.source_index, a.target_index, a.score) for a in request.alignment],
        )


def execution_data_dict(data: platform_pb2.ExecutionData) -> dict[str, Any]:
    """Only what the job set: an empty string or list leaves what the API service recorded."""
    fields = {
        "trainCount": data.train_count,
        "wordAlignCount": data.word_align_count,
        "warnings": list(data.warnings),
        "engineSourceLanguageTag": data.engine_source_language_tag,
        "engineTargetLanguageTag": data.engine_target_language_tag,
    }
    return {key: value for key, value in fields.items() if value not in ("", [])}
