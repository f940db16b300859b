"""serval.translation.v1.TranslationEngineApi over the service functions."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import Caller
from serval_api.db.models import TRANSLATION_TYPES
from serval_api.errors import ServalError
from serval_api.grpc import results
from serval_api.grpc.calls import abort, grpc_call, served_by
from serval_api.grpc.corpora import PRETRANSLATE
from serval_api.grpc.engine_servicer import EngineServicer
from serval_api.service import builds, downloads, engines, status, translation


class TranslationEngineApi(EngineServicer, engine_pb2_grpc.TranslationEngineApiServicer):
    types = TRANSLATION_TYPES
    inference = PRETRANSLATE
    cancel_build_response = engine_pb2.CancelBuildResponse
    queue_size_response = engine_pb2.GetQueueSizeResponse

    @grpc_call
    async def Update(
        self, request: engine_pb2.UpdateRequest, context: Context, caller: Caller
    ) -> empty_pb2.Empty:
        await engines.update_engine_languages(
            self._services,
            caller,
            request.engine_id,
            source_language=request.source_language if request.HasField("source_language") else None,
            target_language=request.target_language if request.HasField("target_language") else None,
        )
        return empty_pb2.Empty()

    @grpc_call
    async def Translate(
        self, request: engine_pb2.TranslateRequest, context: Context, caller: Caller
    ) -> engine_pb2.TranslateResponse:
        served = await translation.translate(
            self._services, caller, request.engine_id, request.segment, request.n or 1
        )
        return engine_pb2.TranslateResponse(results=results.translation_results(served_by(context, served)))

    @grpc_call
    async def TranslatePrefix(
        self, request: engine_pb2.TranslatePrefixRequest, context: Context, caller: Caller
    ) -> engine_pb2.TranslateResponse:
        served = await translation.translate_prefix(
            self._services, caller, request.engine_id, request.segment, request.prefix, request.n or 1
        )
        return engine_pb2.TranslateResponse(results=results.translation_results(served_by(context, served)))

    @grpc_call
    async def GetWordGraph(
        self, request: engine_pb2.GetWordGraphRequest, context: Context, caller: Caller
    ) -> engine_pb2.GetWordGraphResponse:
        served = await translation.get_word_graph(self._services, caller, request.engine_id, request.segment)
        return engine_pb2.GetWordGraphResponse(word_graph=results.word_graph(served_by(context, served)))

    @grpc_call
    async def TrainSegmentPair(
        self, request: engine_pb2.TrainSegmentPairRequest, context: Context, caller: Caller
    ) -> empty_pb2.Empty:
        await translation.train_segment(
            self._services,
            caller,
            request.engine_id,
            request.source_segment,
            request.target_segment,
            request.sentence_start,
        )
        return empty_pb2.Empty()

    @grpc_call
    async def GetModelDownloadUrl(
        self, request: engine_pb2.GetModelDownloadUrlRequest, context: Context, caller: Caller
    ) -> engine_pb2.GetModelDownloadUrlResponse:
        url = await downloads.model_download_url(self._services, caller, request.engine_id)
        response = engine_pb2.GetModelDownloadUrlResponse(url=url.url, model_revision=url.model_revision)
        response.expires_at.FromDatetime(url.expires_at)
        return response

    async def WatchBuild(
        self, request: engine_pb2.WatchBuildRequest, context: Context
    ) -> AsyncIterator[engine_pb2.BuildUpdate]:
        try:
            caller = await self.caller(context)
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

    @grpc_call
    async def GetLanguageInfo(
        self, request: engine_pb2.GetLanguageInfoRequest, context: Context, caller: Caller
    ) -> engine_pb2.GetLanguageInfoResponse:
        _, info = status.language_info(caller, request.engine_type, request.language)
        return engine_pb2.GetLanguageInfoResponse(internal_code=info.code, is_native=info.is_native)
