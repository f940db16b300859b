"""serval.word_alignment.v1.WordAlignmentEngineApi over the service functions, each scoped to
word-alignment engines: a translation engine's id answers NOT_FOUND here, as a word-alignment
engine's does on TranslationEngineApi. Serval's `*:word_alignment_engines` scopes count here
(`Caller.on_word_alignment`), as do the translation-engine scopes."""

from __future__ import annotations

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.word_alignment.v1 import engine_pb2, engine_pb2_grpc
from serval_api.errors import NotFound
from serval_api.grpc import results
from serval_api.grpc.calls import caller_of, run_call, served_by
from serval_api.grpc.corpora import WORD_ALIGN_ON, build_request, options_object
from serval_api.service import Services, build_start, build_transitions, engines, status, word_alignment
from serval_api.service.engines import WORD_ALIGNMENT_TYPES


class WordAlignmentEngineApi(engine_pb2_grpc.WordAlignmentEngineApiServicer):
    def __init__(self, services: Services) -> None:
        self._services = services

    async def Create(self, request: engine_pb2.CreateRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = (await caller_of(self._services, context)).on_word_alignment()
            await engines.create_engine(
                self._services,
                caller,
                engine_type=request.engine_type,
                source_language=request.source_language,
                target_language=request.target_language,
                name=request.engine_name if request.HasField("engine_name") else None,
                engine_id=request.engine_id or None,
                allowed=WORD_ALIGNMENT_TYPES,
            )
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def Delete(self, request: engine_pb2.DeleteRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = (await caller_of(self._services, context)).on_word_alignment()
            await engines.delete_engine(self._services, caller, request.engine_id, WORD_ALIGNMENT_TYPES)
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def GetWordAlignment(
        self, request: engine_pb2.GetWordAlignmentRequest, context: Context
    ) -> engine_pb2.GetWordAlignmentResponse:
        async def call() -> engine_pb2.GetWordAlignmentResponse:
            caller = (await caller_of(self._services, context)).on_word_alignment()
            served = await word_alignment.align(
                self._services, caller, request.engine_id, request.source_segment, request.target_segment
            )
            return engine_pb2.GetWordAlignmentResponse(
                result=results.word_alignment(served_by(context, served))
            )

        return await run_call(context, call)

    async def StartBuild(self, request: engine_pb2.StartBuildRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = (await caller_of(self._services, context)).on_word_alignment()
            max_items = self._services.settings.api.max_list_items
            carried = (
                build_request(request.corpora, max_items, inference=WORD_ALIGN_ON)
                if request.corpora
                else None
            )
            await build_start.start_build(
                self._services,
                caller,
                request.engine_id,
                build_id=request.build_id or None,
                options=options_object(request.options) if request.HasField("options") else None,
                train_on=None if carried is None else carried.train_on,
                word_align_on=None if carried is None else carried.word_align_on,
                catalog=None if carried is None else carried.catalog,
                types=WORD_ALIGNMENT_TYPES,
            )
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def CancelBuild(
        self, request: engine_pb2.CancelBuildRequest, context: Context
    ) -> engine_pb2.CancelBuildResponse:
        async def call() -> engine_pb2.CancelBuildResponse:
            caller = (await caller_of(self._services, context)).on_word_alignment()
            build = await build_transitions.cancel_current_build(
                self._services, caller, request.engine_id, WORD_ALIGNMENT_TYPES
            )
            if build is None:
                raise NotFound(f"engine {request.engine_id} has no build pending or running")
            return engine_pb2.CancelBuildResponse(build_id=build.id)

        return await run_call(context, call)

    async def GetQueueSize(
        self, request: engine_pb2.GetQueueSizeRequest, context: Context
    ) -> engine_pb2.GetQueueSizeResponse:
        async def call() -> engine_pb2.GetQueueSizeResponse:
            caller = (await caller_of(self._services, context)).on_word_alignment()
            _, size = status.queue_size(self._services, caller, request.engine_type, WORD_ALIGNMENT_TYPES)
            return engine_pb2.GetQueueSizeResponse(size=size)

        return await run_call(context, call)
