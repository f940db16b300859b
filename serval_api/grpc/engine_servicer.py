"""The calls TranslationEngineApi and WordAlignmentEngineApi answer alike, each written once in
`EngineServicer`, parameterised by the kind of engine: `types`, the engine types the service layer
scopes a call to, and the kind's own response messages. Each API subclasses it with its package's
generated servicer and adds the calls only it has."""

from __future__ import annotations

from typing import ClassVar

from google.protobuf import empty_pb2
from grpc.aio import ServicerContext as Context

from serval.translation.v1 import engine_pb2 as translation_pb2
from serval.word_alignment.v1 import engine_pb2 as word_alignment_pb2
from serval_api.auth import Caller
from serval_api.db.models import EngineType
from serval_api.errors import NotFound
from serval_api.grpc.calls import AuthenticatedServicer, grpc_call
from serval_api.grpc.corpora import PRETRANSLATE, WORD_ALIGN_ON, build_request, options_object
from serval_api.service import build_start, build_transitions, engines, status

CancelBuildResponse = translation_pb2.CancelBuildResponse | word_alignment_pb2.CancelBuildResponse
GetQueueSizeResponse = translation_pb2.GetQueueSizeResponse | word_alignment_pb2.GetQueueSizeResponse


class EngineServicer(AuthenticatedServicer):
    types: ClassVar[frozenset[EngineType]]
    inference: ClassVar[str]
    """The prefix of the StartBuild corpus fields that choose what a build infers on
    (`corpora.PRETRANSLATE`, `corpora.WORD_ALIGN_ON`)."""
    cancel_build_response: ClassVar[
        type[translation_pb2.CancelBuildResponse] | type[word_alignment_pb2.CancelBuildResponse]
    ]
    queue_size_response: ClassVar[
        type[translation_pb2.GetQueueSizeResponse] | type[word_alignment_pb2.GetQueueSizeResponse]
    ]

    @grpc_call
    async def Create(
        self,
        request: translation_pb2.CreateRequest | word_alignment_pb2.CreateRequest,
        context: Context,
        caller: Caller,
    ) -> empty_pb2.Empty:
        """Only a translation engine's request carries `is_model_persisted`."""
        persisted = (
            request.is_model_persisted
            if isinstance(request, translation_pb2.CreateRequest) and request.HasField("is_model_persisted")
            else None
        )
        await engines.create_engine(
            self._services,
            caller,
            engine_type=request.engine_type,
            source_language=request.source_language,
            target_language=request.target_language,
            name=request.engine_name if request.HasField("engine_name") else None,
            is_model_persisted=persisted,
            engine_id=request.engine_id or None,
            allowed=self.types,
        )
        return empty_pb2.Empty()

    @grpc_call
    async def Delete(
        self,
        request: translation_pb2.DeleteRequest | word_alignment_pb2.DeleteRequest,
        context: Context,
        caller: Caller,
    ) -> empty_pb2.Empty:
        await engines.delete_engine(self._services, caller, request.engine_id, self.types)
        return empty_pb2.Empty()

    @grpc_call
    async def StartBuild(
        self,
        request: translation_pb2.StartBuildRequest | word_alignment_pb2.StartBuildRequest,
        context: Context,
        caller: Caller,
    ) -> empty_pb2.Empty:
        """The request's corpora become the build's catalogue and its entries: `pretranslate` on
        a translation engine, `word_align_on` on a word-alignment engine."""
        max_items = self._services.settings.api.max_list_items
        carried = (
            build_request(request.corpora, max_items, inference=self.inference) if request.corpora else None
        )
        await build_start.start_build(
            self._services,
            caller,
            request.engine_id,
            build_id=request.build_id or None,
            options=options_object(request.options) if request.HasField("options") else None,
            train_on=None if carried is None else carried.train_on,
            pretranslate=carried.pretranslate
            if carried is not None and self.inference == PRETRANSLATE
            else None,
            word_align_on=carried.word_align_on
            if carried is not None and self.inference == WORD_ALIGN_ON
            else None,
            catalog=None if carried is None else carried.catalog,
            types=self.types,
        )
        return empty_pb2.Empty()

    @grpc_call
    async def CancelBuild(
        self,
        request: translation_pb2.CancelBuildRequest | word_alignment_pb2.CancelBuildRequest,
        context: Context,
        caller: Caller,
    ) -> CancelBuildResponse:
        build = await build_transitions.cancel_current_build(
            self._services, caller, request.engine_id, self.types
        )
        if build is None:
            raise NotFound(f"engine {request.engine_id} has no build pending or running")
        return self.cancel_build_response(build_id=build.id)

    @grpc_call
    async def GetQueueSize(
        self,
        request: translation_pb2.GetQueueSizeRequest | word_alignment_pb2.GetQueueSizeRequest,
        context: Context,
        caller: Caller,
    ) -> GetQueueSizeResponse:
        _, size = status.queue_size(self._services, caller, request.engine_type, self.types)
        return self.queue_size_response(size=size)
