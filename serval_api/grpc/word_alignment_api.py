"""serval.word_alignment.v1.WordAlignmentEngineApi over the service functions, each scoped to
word-alignment engines: a translation engine's id answers NOT_FOUND here, as a word-alignment
engine's does on TranslationEngineApi. Serval's `*:word_alignment_engines` scopes count here
(`Caller.on_word_alignment`), as do the translation-engine scopes."""

from __future__ import annotations

from grpc.aio import ServicerContext as Context

from serval.word_alignment.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import Caller
from serval_api.db.models import WORD_ALIGNMENT_TYPES
from serval_api.grpc import results
from serval_api.grpc.calls import grpc_call, served_by
from serval_api.grpc.corpora import WORD_ALIGN_ON
from serval_api.grpc.engine_servicer import EngineServicer
from serval_api.service import word_alignment


class WordAlignmentEngineApi(EngineServicer, engine_pb2_grpc.WordAlignmentEngineApiServicer):
    types = WORD_ALIGNMENT_TYPES
    inference = WORD_ALIGN_ON
    cancel_build_response = engine_pb2.CancelBuildResponse
    queue_size_response = engine_pb2.GetQueueSizeResponse

    async def caller(self, context: Context) -> Caller:
        return (await super().caller(context)).on_word_alignment()

    @grpc_call
    async def GetWordAlignment(
        self, request: engine_pb2.GetWordAlignmentRequest, context: Context, caller: Caller
    ) -> engine_pb2.GetWordAlignmentResponse:
        served = await word_alignment.align(
            self._services, caller, request.engine_id, request.source_segment, request.target_segment
        )
        return engine_pb2.GetWordAlignmentResponse(result=results.word_alignment(served_by(context, served)))
