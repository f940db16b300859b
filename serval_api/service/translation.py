"""Translate a segment with an engine's current model revision."""

from __future__ import annotations

import logging
import re
import uuid

from serval.translation.v1 import common_pb2, engine_pb2
from serval_api.auth import READ_ENGINES, UPDATE_ENGINES, Caller
from serval_api.db.models import Engine, EngineType
from serval_api.errors import InvalidArgument, NotBuilt, NotSupported, PayloadTooLarge
from serval_api.routing.work import ModelKey, TranslateWork
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine

log = logging.getLogger(__name__)

_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


async def translate(
    services: Services, caller: Caller, engine_id: str, segment: str, n: int = 1
) -> list[engine_pb2.TranslationResult]:
    caller.require(READ_ENGINES)
    limits = services.settings.api
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id)
    if not segment.strip():
        raise InvalidArgument("the segment is empty")
    if len(segment) > limits.max_segment_chars:
        raise PayloadTooLarge(
            f"the segment has {len(segment)} characters; the limit is {limits.max_segment_chars}"
        )
    if not 1 <= n <= limits.max_n_best:
        raise InvalidArgument(f"n must be between 1 and {limits.max_n_best}, not {n}")
    _require_built(engine)
    if engine.type == EngineType.ECHO:
        return [echo_result(segment)] * n
    request_id = uuid.uuid4().hex
    log.debug("translate", extra={"engine_id": engine_id, "request_id": request_id, "n": n})
    work = TranslateWork(
        model=ModelKey(engine.id, engine.model_revision),
        source_language=engine.source_code,
        target_language=engine.target_code,
        segment=segment,
        n=n,
    )
    return await services.dispatcher.translate(
        work, request_id=request_id, timeout_s=limits.request_timeout_s
    )


async def get_word_graph(services: Services, caller: Caller, engine_id: str, segment: str) -> None:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id)
    raise NotSupported("word graphs are not supported yet")


async def train_segment(services: Services, caller: Caller, engine_id: str) -> None:
    caller.require(UPDATE_ENGINES)
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id)
    raise NotSupported("incremental training is not supported by this engine type")


def echo_result(segment: str) -> engine_pb2.TranslationResult:
    words = _WORDS.findall(segment)
    primary = engine_pb2.TranslationSources(values=[engine_pb2.TRANSLATION_SOURCE_PRIMARY])
    return engine_pb2.TranslationResult(
        translation=segment.strip(),
        source_tokens=words,
        target_tokens=words,
        confidences=[1.0] * len(words),
        sources=[primary] * len(words),
        alignment=[common_pb2.AlignedWordPair(source_index=i, target_index=i) for i in range(len(words))],
        phrases=[
            engine_pb2.Phrase(
                source_segment_start=0, source_segment_end=len(words), target_segment_cut=len(words)
            )
        ],
    )


def _require_built(engine: Engine) -> None:
    if engine.model_revision == 0:
        raise NotBuilt(f"engine {engine.id} has not been built yet; start a build first")
