from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.engine_routes import inference_route, served
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import (
    PrefixRequest,
    SegmentPair,
    TranslationResult,
    WordGraph,
    result_dto,
    word_graph_dto,
)
from serval_api.service import translation

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])

Segment = Annotated[str, Body(description="The source segment, as a JSON string")]


@inference_route(router, "/translate", TranslationResult)
async def translate(
    engine_id: str,
    segment: Segment,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> TranslationResult:
    results = await served(request, response, translation.translate(services, caller, engine_id, segment, 1))
    return result_dto(results[0])


@inference_route(router, "/translate/{n}", list[TranslationResult])
async def translate_n(
    engine_id: str,
    n: int,
    segment: Segment,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> list[TranslationResult]:
    results = await served(request, response, translation.translate(services, caller, engine_id, segment, n))
    return [result_dto(r) for r in results]


@inference_route(router, "/translate-prefix", list[TranslationResult])
async def translate_prefix(
    engine_id: str,
    body: PrefixRequest,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> list[TranslationResult]:
    work = translation.translate_prefix(services, caller, engine_id, body.segment, body.prefix, body.n)
    return [result_dto(r) for r in await served(request, response, work)]


@inference_route(router, "/get-word-graph", WordGraph)
async def get_word_graph(
    engine_id: str,
    segment: Segment,
    request: Request,
    response: Response,
    services: ServicesDep,
    caller: CallerDep,
) -> WordGraph:
    graph = await served(request, response, translation.get_word_graph(services, caller, engine_id, segment))
    return word_graph_dto(graph)


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
