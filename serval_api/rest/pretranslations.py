"""Serval's pretranslation reads: the rows of the engine's current model, as JSON or as USFM."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from fastapi.responses import PlainTextResponse

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import Pretranslation, pretranslation_dto
from serval_api.service import pretranslations
from serval_api.service.pretranslations import MarkerBehavior, TextOrigin, UsfmOptions, UsfmTemplate

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])

TextId = Annotated[str | None, Query(alias="textId", description="only this text (a book id for Scripture)")]


@router.get(
    "/parallel-corpora/{parallel_corpus_id}/pretranslations",
    response_model=list[Pretranslation],
    responses=errors(409),
)
async def list_pretranslations(
    engine_id: str, parallel_corpus_id: str, services: ServicesDep, caller: CallerDep, text_id: TextId = None
) -> list[Pretranslation]:
    """The pretranslations of the engine's current model for the parallel corpus, in source order."""
    rows = await pretranslations.list_pretranslations(
        services, caller, engine_id, parallel_corpus_id, text_id=text_id
    )
    return [pretranslation_dto(row) for row in rows]


@router.get(
    "/corpora/{corpus_id}/pretranslations",
    response_model=list[Pretranslation],
    responses=errors(409),
)
async def list_corpus_pretranslations(
    engine_id: str, corpus_id: str, services: ServicesDep, caller: CallerDep, text_id: TextId = None
) -> list[Pretranslation]:
    """Serval's older path: an engine's corpus there is what a parallel corpus is here, so
    `corpusId` names one of the engine's parallel corpora."""
    rows = await pretranslations.list_pretranslations(services, caller, engine_id, corpus_id, text_id=text_id)
    return [pretranslation_dto(row) for row in rows]


@router.get(
    "/parallel-corpora/{parallel_corpus_id}/pretranslations/{text_id}/usfm",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        204: {"description": "The source project has no such book"},
        **errors(409),
    },
)
async def get_pretranslated_usfm(
    engine_id: str,
    parallel_corpus_id: str,
    text_id: str,
    services: ServicesDep,
    caller: CallerDep,
    text_origin: Annotated[TextOrigin, Query(alias="textOrigin")] = TextOrigin.PREFER_PRETRANSLATED,
    template: Annotated[UsfmTemplate, Query()] = UsfmTemplate.SOURCE,
    paragraph_marker_behavior: Annotated[
        MarkerBehavior, Query(alias="paragraphMarkerBehavior")
    ] = MarkerBehavior.PRESERVE,
    embed_behavior: Annotated[MarkerBehavior, Query(alias="embedBehavior")] = MarkerBehavior.PRESERVE,
    style_marker_behavior: Annotated[
        MarkerBehavior, Query(alias="styleMarkerBehavior")
    ] = MarkerBehavior.STRIP,
) -> Response:
    """The source Paratext project's book `textId` with its verses filled by the pretranslations.
    The source's own text is never kept, so only `OnlyPretranslated` and `PreferPretranslated`
    are served (the same USFM), and only the `Source` template (or `Auto` when the target is no
    Paratext project); the other values answer 400."""
    options = UsfmOptions(
        text_origin=text_origin,
        template=template,
        paragraph_behavior=paragraph_marker_behavior,
        embed_behavior=embed_behavior,
        style_behavior=style_marker_behavior,
    )
    usfm = await pretranslations.usfm(services, caller, engine_id, parallel_corpus_id, text_id, options)
    if usfm is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return PlainTextResponse(usfm)
