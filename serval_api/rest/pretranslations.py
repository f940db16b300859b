"""Serval's pretranslation reads: the rows of the engine's current model, as JSON or as USFM.

Query parameters take Serval's kebab-case names (`text-id`, `text-origin`, …); the camelCase names
this service answered before still work."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query, Response, status
from fastapi.responses import PlainTextResponse

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import Pretranslation, pretranslation_dto
from serval_api.service import pretranslation_usfm, pretranslations
from serval_api.service.pretranslation_usfm import (
    MarkerBehavior,
    QuotationMarkBehavior,
    TextOrigin,
    UsfmOptions,
    UsfmTemplate,
)

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])

E = TypeVar("E")


def _either(kebab: E | None, camel: E | None, default: E) -> E:
    return kebab if kebab is not None else camel if camel is not None else default


def _old(alias: str) -> Any:
    return Query(alias=alias, include_in_schema=False)


def text_id_query(
    kebab: Annotated[
        str | None, Query(alias="text-id", description="only this text (a book id for Scripture)")
    ] = None,
    camel: Annotated[str | None, _old("textId")] = None,
) -> str | None:
    return kebab if kebab is not None else camel


def usfm_options(
    text_origin: Annotated[
        TextOrigin | None,
        Query(alias="text-origin", description="where verse texts come from (PreferExisting)"),
    ] = None,
    template: Annotated[
        UsfmTemplate | None, Query(description="the project whose book is the template (Auto)")
    ] = None,
    paragraph_marker_behavior: Annotated[
        MarkerBehavior | None, Query(alias="paragraph-marker-behavior")
    ] = None,
    embed_behavior: Annotated[MarkerBehavior | None, Query(alias="embed-behavior")] = None,
    style_marker_behavior: Annotated[MarkerBehavior | None, Query(alias="style-marker-behavior")] = None,
    quotation_mark_behavior: Annotated[
        QuotationMarkBehavior | None,
        Query(
            alias="quotation-mark-behavior",
            description="Normalized (default) or Denormalized: into the target's quote convention",
        ),
    ] = None,
    text_origin_camel: Annotated[TextOrigin | None, _old("textOrigin")] = None,
    paragraph_camel: Annotated[MarkerBehavior | None, _old("paragraphMarkerBehavior")] = None,
    embed_camel: Annotated[MarkerBehavior | None, _old("embedBehavior")] = None,
    style_camel: Annotated[MarkerBehavior | None, _old("styleMarkerBehavior")] = None,
    quotation_camel: Annotated[QuotationMarkBehavior | None, _old("quotationMarkBehavior")] = None,
) -> UsfmOptions:
    default = UsfmOptions()
    return UsfmOptions(
        text_origin=_either(text_origin, text_origin_camel, default.text_origin),
        template=template or default.template,
        paragraph_behavior=_either(paragraph_marker_behavior, paragraph_camel, default.paragraph_behavior),
        embed_behavior=_either(embed_behavior, embed_camel, default.embed_behavior),
        style_behavior=_either(style_marker_behavior, style_camel, default.style_behavior),
        quotation_marks=_either(quotation_mark_behavior, quotation_camel, default.quotation_marks),
    )


TextIdQuery = Annotated[str | None, Depends(text_id_query)]
UsfmOptionsDep = Annotated[UsfmOptions, Depends(usfm_options)]

USFM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
    204: {"description": "No Paratext project of the corpus has the book"},
    **errors(409),
}


def _usfm_response(usfm: str | None) -> Response:
    if usfm is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return PlainTextResponse(usfm)


@router.get(
    "/parallel-corpora/{parallel_corpus_id}/pretranslations",
    response_model=list[Pretranslation],
    responses=errors(409),
)
async def list_pretranslations(
    engine_id: str, parallel_corpus_id: str, services: ServicesDep, caller: CallerDep, text_id: TextIdQuery
) -> list[Pretranslation]:
    """The pretranslations of the engine's current model for the parallel corpus, in source order."""
    rows = await pretranslations.list_pretranslations(
        services, caller, engine_id, parallel_corpus_id, text_id=text_id
    )
    return [pretranslation_dto(row) for row in rows]


@router.get(
    "/parallel-corpora/{parallel_corpus_id}/pretranslations/{text_id}",
    response_model=list[Pretranslation],
    responses=errors(409),
)
async def list_text_pretranslations(
    engine_id: str, parallel_corpus_id: str, text_id: str, services: ServicesDep, caller: CallerDep
) -> list[Pretranslation]:
    """The pretranslations of one text (a book id for Scripture) of the parallel corpus."""
    rows = await pretranslations.list_pretranslations(
        services, caller, engine_id, parallel_corpus_id, text_id=text_id
    )
    return [pretranslation_dto(row) for row in rows]


@router.get(
    "/parallel-corpora/{parallel_corpus_id}/pretranslations/{text_id}/usfm",
    response_class=PlainTextResponse,
    responses=USFM_RESPONSES,
)
async def get_pretranslated_usfm(
    engine_id: str,
    parallel_corpus_id: str,
    text_id: str,
    services: ServicesDep,
    caller: CallerDep,
    options: UsfmOptionsDep,
) -> Response:
    """Book `textId` of a Paratext project of the parallel corpus, its verses filled by the
    pretranslations and/or the target's existing text (see docs/pretranslations.md)."""
    usfm = await pretranslation_usfm.usfm(services, caller, engine_id, parallel_corpus_id, text_id, options)
    return _usfm_response(usfm)


@router.get(
    "/corpora/{corpus_id}/pretranslations",
    response_model=list[Pretranslation],
    responses=errors(409),
)
async def list_corpus_pretranslations(
    engine_id: str, corpus_id: str, services: ServicesDep, caller: CallerDep, text_id: TextIdQuery
) -> list[Pretranslation]:
    """Serval's older engine-scoped path: `corpusId` names one of the engine's corpora, or else
    one of its parallel corpora."""
    rows = await pretranslations.list_pretranslations(
        services, caller, engine_id, corpus_id, text_id=text_id, engine_corpus=True
    )
    return [pretranslation_dto(row) for row in rows]


@router.get(
    "/corpora/{corpus_id}/pretranslations/{text_id}",
    response_model=list[Pretranslation],
    responses=errors(409),
)
async def list_corpus_text_pretranslations(
    engine_id: str, corpus_id: str, text_id: str, services: ServicesDep, caller: CallerDep
) -> list[Pretranslation]:
    """The pretranslations of one text of an engine corpus (or else a parallel corpus)."""
    rows = await pretranslations.list_pretranslations(
        services, caller, engine_id, corpus_id, text_id=text_id, engine_corpus=True
    )
    return [pretranslation_dto(row) for row in rows]


@router.get(
    "/corpora/{corpus_id}/pretranslations/{text_id}/usfm",
    response_class=PlainTextResponse,
    responses=USFM_RESPONSES,
)
async def get_corpus_pretranslated_usfm(
    engine_id: str,
    corpus_id: str,
    text_id: str,
    services: ServicesDep,
    caller: CallerDep,
    options: UsfmOptionsDep,
) -> Response:
    """As the parallel-corpus USFM, for an engine corpus (or else a parallel corpus)."""
    usfm = await pretranslation_usfm.usfm(
        services, caller, engine_id, corpus_id, text_id, options, engine_corpus=True
    )
    return _usfm_response(usfm)
