"""Serval's word-alignment engines over REST: the engines, `align`, the word alignments a build
made, and the engine-type queue. Builds and parallel corpora are in `word_alignment_builds.py`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from serval_api.db.models import WORD_ALIGNMENT_TYPES
from serval_api.rest import engine_routes
from serval_api.rest.deps import ServicesDep, WordAlignmentCallerDep
from serval_api.rest.engine_routes import WORD_ALIGNMENT, inference_route, served
from serval_api.rest.openapi import errors
from serval_api.rest.pretranslations import TextIdQuery
from serval_api.rest.protocol import Queue
from serval_api.rest.word_alignment_protocol import (
    WordAlignment,
    WordAlignmentEngine,
    WordAlignmentEngineConfig,
    WordAlignmentRequest,
    WordAlignmentResult,
    result_dto,
    word_alignment_dto,
)
from serval_api.service import status as status_service
from serval_api.service import word_alignment

TAG = "Word Alignment Engines"
router = APIRouter(prefix="/api/v1/word-alignment", tags=[TAG])


async def create_engine(
    config: WordAlignmentEngineConfig,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    response: Response,
) -> WordAlignmentEngine:
    return await engine_routes.create_engine(services, caller, config, response, WORD_ALIGNMENT)


engine_routes.add_engine_routes(router, WORD_ALIGNMENT, "/engines", create_engine)


@inference_route(router, "/engines/{engine_id}/align", WordAlignmentResult)
async def align(
    engine_id: str,
    pair: WordAlignmentRequest,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
) -> WordAlignmentResult:
    work = word_alignment.align(services, caller, engine_id, pair.source_segment, pair.target_segment)
    return result_dto(await served(request, response, work))


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
