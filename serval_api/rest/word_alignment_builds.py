"""A word-alignment engine's parallel corpora and builds over REST: the translation services
scoped to word-alignment engines, in Serval's word-alignment shapes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from serval_api.rest.build_corpora import training_entries
from serval_api.rest.builds import MinRevision
from serval_api.rest.deps import ServicesDep, WordAlignmentCallerDep
from serval_api.rest.openapi import errors
from serval_api.rest.word_alignment import TAG
from serval_api.rest.word_alignment_protocol import (
    WordAlignmentBuild,
    WordAlignmentBuildConfig,
    WordAlignmentParallelCorpus,
    WordAlignmentParallelCorpusConfig,
    WordAlignmentParallelCorpusUpdateConfig,
    build_dto,
    parallel_corpus_dto,
    word_align_entries,
)
from serval_api.service import build_start, build_transitions, builds, parallel_corpora
from serval_api.service.engines import WORD_ALIGNMENT_TYPES

router = APIRouter(prefix="/api/v1/word-alignment/engines/{engine_id}", tags=[TAG])

NO_BUILD: dict[int | str, dict[str, Any]] = {204: {"description": "No build is pending or running"}}


@router.get(
    "/parallel-corpora", response_model=list[WordAlignmentParallelCorpus], response_model_exclude_none=True
)
async def list_parallel_corpora(
    engine_id: str, services: ServicesDep, caller: WordAlignmentCallerDep
) -> list[WordAlignmentParallelCorpus]:
    base = services.settings.api_base_url
    found = await parallel_corpora.list_parallel_corpora(services, caller, engine_id, WORD_ALIGNMENT_TYPES)
    return [parallel_corpus_dto(base, pc) for pc in found]


@router.post(
    "/parallel-corpora",
    status_code=status.HTTP_201_CREATED,
    response_model=WordAlignmentParallelCorpus,
    response_model_exclude_none=True,
)
async def create_parallel_corpus(
    engine_id: str,
    config: WordAlignmentParallelCorpusConfig,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    response: Response,
) -> WordAlignmentParallelCorpus:
    pc = await parallel_corpora.create_parallel_corpus(
        services,
        caller,
        engine_id,
        source_corpus_ids=config.source_corpus_ids,
        target_corpus_ids=config.target_corpus_ids,
        name=config.name,
        types=WORD_ALIGNMENT_TYPES,
    )
    dto = parallel_corpus_dto(services.settings.api_base_url, pc)
    response.headers["Location"] = dto.url
    return dto


@router.get(
    "/parallel-corpora/{pc_id}", response_model=WordAlignmentParallelCorpus, response_model_exclude_none=True
)
async def get_parallel_corpus(
    engine_id: str, pc_id: str, services: ServicesDep, caller: WordAlignmentCallerDep
) -> WordAlignmentParallelCorpus:
    pc = await parallel_corpora.get_parallel_corpus(services, caller, engine_id, pc_id, WORD_ALIGNMENT_TYPES)
    return parallel_corpus_dto(services.settings.api_base_url, pc)


@router.patch(
    "/parallel-corpora/{pc_id}", response_model=WordAlignmentParallelCorpus, response_model_exclude_none=True
)
async def update_parallel_corpus(
    engine_id: str,
    pc_id: str,
    config: WordAlignmentParallelCorpusUpdateConfig,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
) -> WordAlignmentParallelCorpus:
    pc = await parallel_corpora.update_parallel_corpus(
        services,
        caller,
        engine_id,
        pc_id,
        source_corpus_ids=config.source_corpus_ids,
        target_corpus_ids=config.target_corpus_ids,
        types=WORD_ALIGNMENT_TYPES,
    )
    return parallel_corpus_dto(services.settings.api_base_url, pc)


@router.delete("/parallel-corpora/{pc_id}", status_code=status.HTTP_200_OK)
async def delete_parallel_corpus(
    engine_id: str, pc_id: str, services: ServicesDep, caller: WordAlignmentCallerDep
) -> None:
    await parallel_corpora.delete_parallel_corpus(services, caller, engine_id, pc_id, WORD_ALIGNMENT_TYPES)


@router.get("/builds", response_model=list[WordAlignmentBuild], response_model_exclude_none=True)
async def list_builds(
    engine_id: str, services: ServicesDep, caller: WordAlignmentCallerDep
) -> list[WordAlignmentBuild]:
    base = services.settings.api_base_url
    return [
        build_dto(base, b)
        for b in await builds.list_builds(services, caller, engine_id, WORD_ALIGNMENT_TYPES)
    ]


@router.post(
    "/builds",
    status_code=status.HTTP_201_CREATED,
    response_model=WordAlignmentBuild,
    response_model_exclude_none=True,
    responses=errors(409),
)
async def start_build(
    engine_id: str,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    response: Response,
    config: WordAlignmentBuildConfig | None = None,
) -> WordAlignmentBuild:
    config = config or WordAlignmentBuildConfig()
    build = await build_start.start_build(
        services,
        caller,
        engine_id,
        name=config.name,
        train_on=training_entries(config.train_on),
        word_align_on=word_align_entries(config.word_align_on),
        options=config.options,
        types=WORD_ALIGNMENT_TYPES,
    )
    dto = build_dto(services.settings.api_base_url, build)
    response.headers["Location"] = dto.url
    return dto


@router.get(
    "/builds/{build_id}",
    response_model=WordAlignmentBuild,
    response_model_exclude_none=True,
    responses=errors(408),
)
async def get_build(
    engine_id: str,
    build_id: str,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    min_revision: MinRevision = None,
) -> WordAlignmentBuild:
    build = await builds.get_build(
        services, caller, engine_id, build_id, min_revision=min_revision, types=WORD_ALIGNMENT_TYPES
    )
    return build_dto(services.settings.api_base_url, build)


@router.get(
    "/current-build",
    response_model=WordAlignmentBuild,
    response_model_exclude_none=True,
    responses={**NO_BUILD, **errors(408)},
)
async def current_build(
    engine_id: str, services: ServicesDep, caller: WordAlignmentCallerDep, min_revision: MinRevision = None
) -> WordAlignmentBuild | Response:
    build = await builds.current_build(
        services, caller, engine_id, min_revision=min_revision, types=WORD_ALIGNMENT_TYPES
    )
    if build is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return build_dto(services.settings.api_base_url, build)


@router.post(
    "/current-build/cancel",
    response_model=WordAlignmentBuild,
    response_model_exclude_none=True,
    responses=NO_BUILD,
)
async def cancel_current_build(
    engine_id: str, services: ServicesDep, caller: WordAlignmentCallerDep
) -> WordAlignmentBuild | Response:
    build = await build_transitions.cancel_current_build(services, caller, engine_id, WORD_ALIGNMENT_TYPES)
    if build is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return build_dto(services.settings.api_base_url, build)
