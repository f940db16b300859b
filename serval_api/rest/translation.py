from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import APIRouter, Body, Request, Response

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.disconnect import while_connected
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import (
    PrefixRequest,
    SegmentPair,
    TranslationResult,
    WordGraph,
    result_dto,
    word_graph_dto,
)
from serval_api.routing.work import Served
from serval_api.service import translation

T = TypeVar("T")

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])

Segment = Annotated[str, Body(description="The source segment, as a JSON string")]

MODEL_REVISION_HEADER = "X-Model-Revision"
"""Which model revision answered; during a hot swap it can be the one before `modelRevision`."""


def served_by(response: Response, served: Served[T]) -> T:
    response.headers[MODEL_REVISION_HEADER] = str(served.revision)
    return served.value


@router.post(
    "/translate",
    response_model=TranslationResult,
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def translate(
    engine_id: str,
    segment: Segment,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> TranslationResult:
    served = await while_connected(request, translation.translate(services, caller, engine_id, segment, 1))
    return result_dto(served_by(response, served)[0])


@router.post(
    "/translate/{n}",
    response_model=list[TranslationResult],
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def translate_n(
    engine_id: str,
    n: int,
    segment: Segment,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> list[TranslationResult]:
    served = await while_connected(request, translation.translate(services, caller, engine_id, segment, n))
    return [result_dto(r) for r in served_by(response, served)]


@router.post(
    "/translate-prefix",
    response_model=list[TranslationResult],
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def translate_prefix(
    engine_id: str,
    body: PrefixRequest,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> list[TranslationResult]:
    served = await while_connected(
        request, translation.translate_prefix(services, caller, engine_id, body.segment, body.prefix, body.n)
    )
    return [result_dto(r) for r in served_by(response, served)]


@router.post(
    "/get-word-graph",
    response_model=WordGraph,
    response_model_exclude_none=True,
    responses=errors(405, 409, 413, 503),
)
async def get_word_graph(
    engine_id: str,
    segment: Segment,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> WordGraph:
    served = await while_connected(request, translation.get_word_graph(services, caller, engine_id, segment))
    return word_graph_dto(served_by(response, served))


@router.post(
    "/train-segment",
    response_class=Response,
    responses={200: {"description": "The pair is stored; the body is empty"}, **errors(409, 413)},
)
async def train_segment(
    engine_id: str, pair: SegmentPair, services: ServicesDep, caller: CallerDep
) -> Response:
    await translation.train_segment(
        services, caller, engine_id, pair.source_segment, pair.target_segment, pair.sentence_start
    )
    return Response(status_code=200)
