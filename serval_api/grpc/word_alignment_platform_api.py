"""serval.word_alignment.v1.WordAlignmentPlatformApi: what word-alignment build jobs report. Its
build RPCs carry the same fields as TranslationPlatformApi's and reach the same build services,
authorized by the build's job token, so they are that servicer's methods (its `ExecutionData`,
with `word_align_count`, goes through the same `execution_data_from`); only the stream of aligned
pairs (InsertWordAlignments) is its own."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.word_alignment.v1 import platform_pb2, platform_pb2_grpc
from serval_api.grpc.calls import bearer_token, run_call
from serval_api.grpc.platform_api import TranslationPlatformApi
from serval_api.service import word_alignment


class WordAlignmentPlatformApi(TranslationPlatformApi, platform_pb2_grpc.WordAlignmentPlatformApiServicer):
    """BuildStarted, UpdateBuildStatus, UpdateBuildExecutionData, BuildCompleted, BuildFaulted,
    BuildCanceled, BuildRestarting and IncrementEngineCorpusSize are TranslationPlatformApi's."""

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
) -> AsyncIterator[word_alignment.WordAlignmentInsert]:
    async for request in requests:
        yield word_alignment.WordAlignmentInsert(
            engine_id=request.engine_id,
            corpus_id=request.corpus_id,
            text_id=request.text_id,
            source_refs=list(request.source_refs),
            target_refs=list(request.target_refs),
            source_tokens=list(request.source_tokens),
            target_tokens=list(request.target_tokens),
            alignment=[(a.source_index, a.target_index, a.score) for a in request.alignment],
        )
