from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import SegmentPair, TranslationResult, result_dto
from serval_api.service import translation

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])

Segment = Annotated[str, Body(description="The source segment, as a JSON string")]


@router.post(
    "/translate",
    response_model=TranslationResult,
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def translate(
    engine_id: str, segment: Segment, services: ServicesDep, caller: CallerDep
) -> TranslationResult:
    results = await translation.translate(services, caller, engine_id, segment, 1)
    return result_dto(results[0])


@router.post(
    "/translate/{n}",
    response_model=list[TranslationResult],
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def translate_n(
    engine_id: str, n: int, segment: Segment, services: ServicesDep, caller: CallerDep
) -> list[TranslationResult]:
    results = await translation.translate(services, caller, engine_id, segment, n)
    return [result_dto(r) for r in results]


@router.post("/get-word-graph", responses=errors(405, 409, 413, 503))
async def get_word_graph(engine_id: str, segment: Segment, services: ServicesDep, caller: CallerDep) -> None:
    await translation.get_word_graph(services, caller, engine_id, segment)


@router.post("/train-segment", responses=errors(405, 409, 503))
async def train_segment(engine_id: str, pair: SegmentPair, services: ServicesDep, caller: CallerDep) -> None:
    await translation.train_segment(services, caller, engine_id)
