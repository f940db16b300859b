"""serval.translation.v1.TranslationEngineApi over the service functions."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.errors import NotFound, ServalError
from serval_api.grpc import results
from serval_api.grpc.calls import abort, caller_of, run_call, served_by
from serval_api.grpc.corpora import build_request, options_object
from serval_api.service import (
    Services,
    build_start,
    build_transitions,
    builds,
    downloads,
    engines,
    status,
    translation,
)


class TranslationEngineApi(engine_pb2_grpc.TranslationEngineApiServicer):
    def __init__(self, services: Services) -> None:
        self._services = services

    async def Create(self, request: engine_pb2.CreateRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = await caller_of(self._services, context)
            await engines.create_engine(
                self._services,
                caller,
                engine_type=request.engine_type,
                source_language=request.source_language,
                target_language=request.target_language,
                name=request.engine_name if request.HasField("engine_name") else None,
                is_model_persisted=(
                    request.is_model_persisted if request.HasField("is_model_persisted") else None
                ),
                engine_id=request.engine_id or None,
            )
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def Delete(self, request: engine_pb2.DeleteRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = await caller_of(self._services, context)
            await engines.delete_engine(self._services, caller, request.engine_id)
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def Update(self, request: engine_pb2.UpdateRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = await caller_of(self._services, context)
            await engines.update_engine_languages(
                self._services,
                caller,
                request.engine_id,
                source_language=request.source_language if request.HasField("source_language") else None,
                target_language=request.target_language if request.HasField("target_language") else None,
            )
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def Translate(
        self, request: engine_pb2.TranslateRequest, context: Context
    ) -> engine_pb2.TranslateResponse:
        async def call() -> engine_pb2.TranslateResponse:
            caller = await caller_of(self._services, context)
            served = await translation.translate(
                self._services, caller, request.engine_id, request.segment, request.n or 1
            )
            return engine_pb2.TranslateResponse(
                results=results.translation_results(served_by(context, served))
            )

        return await run_call(context, call)

    async def TranslatePrefix(
        self, request: engine_pb2.TranslatePrefixRequest, context: Context
    ) -> engine_pb2.TranslateResponse:
        async def call() -> engine_pb2.TranslateResponse:
            caller = await caller_of(self._services, context)
            served = await translation.translate_prefix(
                self._services, caller, request.engine_id, request.segment, request.prefix, request.n or 1
            )
            return engine_pb2.TranslateResponse(
                results=results.translation_results(served_by(context, served))
            )

        return await run_call(context, call)

    async def GetWordGraph(
        self, request: engine_pb2.GetWordGraphRequest, context: Context
    ) -> engine_pb2.GetWordGraphResponse:
        async def call() -> engine_pb2.GetWordGraphResponse:
            caller = await caller_of(self._services, context)
            served = await translation.get_word_graph(
                self._services, caller, request.engine_id, request.segment
            )
            return engine_pb2.GetWordGraphResponse(word_graph=results.word_graph(served_by(context, served)))

        return await run_call(context, call)

    async def TrainSegmentPair(
        self, request: engine_pb2.TrainSegmentPairRequest, context: Context
    ) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = await caller_of(self._services, context)
            await translation.train_segment(
                self._services,
                caller,
                request.engine_id,
                request.source_segment,
                request.target_segment,
                request.sentence_start,
            )
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def StartBuild(self, request: engine_pb2.StartBuildRequest, context: Context) -> empty_pb2.Empty:
        async def call() -> empty_pb2.Empty:
            caller = await caller_of(self._services, context)
            carried = (
                build_request(request.corpora, self._services.settings.api.max_list_items)
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
                pretranslate=None if carried is None else carried.pretranslate,
                catalog=None if carried is None else carried.catalog,
            )
            return empty_pb2.Empty()

        return await run_call(context, call)

    async def CancelBuild(
        self, request: engine_pb2.CancelBuildRequest, context: Context
    ) -> engine_pb2.CancelBuildResponse:
        async def call() -> engine_pb2.CancelBuildResponse:
            caller = await caller_of(self._services, context)
            build = await build_transitions.cancel_current_build(self._services, caller, request.engine_id)
            if build is None:
                raise NotFound(f"engine {request.engine_id} has no build pending or running")
            return engine_pb2.CancelBuildResponse(build_id=build.id)

        return await run_call(context, call)

    async def GetModelDownloadUrl(
        self, request: engine_pb2.GetModelDownloadUrlRequest, context: Context
    ) -> engine_pb2.GetModelDownloadUrlResponse:
        async def call() -> engine_pb2.GetModelDownloadUrlResponse:
            caller = await caller_of(self._services, context)
            url = await downloads.model_download_url(self._services, caller, request.engine_id)
            response = engine_pb2.GetModelDownloadUrlResponse(url=url.url, model_revision=url.model_revision)
            response.expires_at.FromDatetime(url.expires_at)
            return response

        return await run_call(context, call)

    async def WatchBuild(
        self, request: engine_pb2.WatchBuildRequest, context: Context
    ) -> AsyncIterator[engine_pb2.BuildUpdate]:
        try:
            caller = await caller_of(self._services, context)
            updates = builds.watch_build(
                self._services,
                caller,
                request.engine_id,
                request.build_id or None,
                min_revision=request.min_revision,
            )
            async with contextlib.aclosing(updates):  # ends its long poll when the call does
                async for build, model_revision in updates:
                    yield engine_pb2.BuildUpdate(
                        build_id=build.id,
                        revision=build.revision,
                        state=build.state,
                        progress=build.progress,
                        message=build.message,
                        queue_depth=build.queue_depth or 0,
                        step=build.step,
                        engine_model_revision=model_revision,
                    )
        except ServalError as e:
            await abort(context, e)

    async def GetQueueSize(
        self, request: engine_pb2.GetQueueSizeRequest, context: Context
    ) -> engine_pb2.GetQueueSizeResponse:
        async def call() -> engine_pb2.GetQueueSizeResponse:
            caller = await caller_of(self._services, context)
            _, size = status.queue_size(self._services, caller, request.engine_type)
            return engine_pb2.GetQueueSizeResponse(size=size)

        return await run_call(context, call)

    async def GetLanguageInfo(
        self, request: engine_pb2.GetLanguageInfoRequest, context: Context
    ) -> engine_pb2.GetLanguageInfoResponse:
        async def call() -> engine_pb2.GetLanguageInfoResponse:
            caller = await caller_of(self._services, context)
            _, info = status.language_info(caller, request.engine_type, request.language)
            return engine_pb2.GetLanguageInfoResponse(internal_code=info.code, is_native=info.is_native)

        return await run_call(context, call)
