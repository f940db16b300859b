"""Serval's word-alignment engines over REST: the engines, `align`, the word alignments a build
made, and the engine-type queue. Builds and parallel corpora are in `word_alignment_builds.py`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from serval_api.rest.deps import ServicesDep, WordAlignmentCallerDep
from serval_api.rest.disconnect import while_connected
from serval_api.rest.openapi import errors
from serval_api.rest.pretranslations import TextIdQuery
from serval_api.rest.protocol import Queue
from serval_api.rest.translation import served_by
from serval_api.rest.word_alignment_protocol import (
    WordAlignment,
    WordAlignmentEngine,
    WordAlignmentEngineConfig,
    WordAlignmentRequest,
    WordAlignmentResult,
    engine_dto,
    result_dto,
    word_alignment_dto,
)
from serval_api.service import engines, word_alignment
from serval_api.service import status as status_service
from serval_api.service.engines import WORD_ALIGNMENT_TYPES

TAG = "Word Alignment Engines"
router = APIRouter(prefix="/api/v1/word-alignment", tags=[TAG])


@router.get("/engines", response_model=list[WordAlignmentEngine], response_model_exclude_none=True)
async def list_engines(services: ServicesDep, caller: WordAlignmentCallerDep) -> list[WordAlignmentEngine]:
    base = services.settings.api_base_url
    return [engine_dto(base, e) for e in await engines.list_engines(services, caller, WORD_ALIGNMENT_TYPES)]


@router.post(
    "/engines",
    status_code=status.HTTP_201_CREATED,
    response_model=WordAlignmentEngine,
    response_model_exclude_none=True,
    responses=errors(405, 409),
)
async def create_engine(
    config: WordAlignmentEngineConfig,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    response: Response,
) -> WordAlignmentEngine:
    engine = await engines.create_engine(
        services,
        caller,
        engine_type=config.type,
        source_language=config.source_language,
        target_language=config.target_language,
        name=config.name,
        is_model_persisted=config.is_model_persisted,
        allowed=WORD_ALIGNMENT_TYPES,
    )
    dto = engine_dto(services.settings.api_base_url, engine)
    response.headers["Location"] = dto.url
    return dto


@router.get("/engines/{engine_id}", response_model=WordAlignmentEngine, response_model_exclude_none=True)
async def get_engine(
    engine_id: str, services: ServicesDep, caller: WordAlignmentCallerDep
) -> WordAlignmentEngine:
    engine = await engines.get_engine(services, caller, engine_id, WORD_ALIGNMENT_TYPES)
    return engine_dto(services.settings.api_base_url, engine)


@router.delete("/engines/{engine_id}", status_code=status.HTTP_200_OK)
async def delete_engine(engine_id: str, services: ServicesDep, caller: WordAlignmentCallerDep) -> None:
    await engines.delete_engine(services, caller, engine_id, WORD_ALIGNMENT_TYPES)


@router.post(
    "/engines/{engine_id}/align",
    response_model=WordAlignmentResult,
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def align(
    engine_id: str,
    pair: WordAlignmentRequest,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
) -> WordAlignmentResult:
    served = await while_connected(
        request,
        word_alignment.align(services, caller, engine_id, pair.source_segment, pair.target_segment),
    )
    return result_dto(served_by(response, served))


@router.get(
    "/engines/{engine_id}/corpora/{corpus_id}/word-alignments",
    response_model=list[WordAlignment],
    response_model_exclude_none=True,
    responses=errors(409),
)
async def list_word_alignments(
    engine_id: str,
    corpus_id: str,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    text_id: TextIdQuery,
) -> list[WordAlignment]:
    """The word alignments of the engine's current model for a parallel corpus of the engine."""
    rows = await word_alignment.list_word_alignments(services, caller, engine_id, corpus_id, text_id=text_id)
    return [word_alignment_dto(row) for row in rows]


@router.get("/engine-types/{engine_type}/queues", response_model=Queue, responses=errors(405))
async def queue(engine_type: str, services: ServicesDep, caller: WordAlignmentCallerDep) -> Queue:
    kind, size = status_service.queue_size(services, caller, engine_type, WORD_ALIGNMENT_TYPES)
    return Queue(size=size, engine_type=kind)
