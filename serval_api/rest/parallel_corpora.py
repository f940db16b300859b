from __future__ import annotations

from fastapi import APIRouter, Response, status

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.files_protocol import (
    ParallelCorpus,
    ParallelCorpusConfig,
    ParallelCorpusUpdateConfig,
    parallel_corpus_dto,
)
from serval_api.service import parallel_corpora

router = APIRouter(
    prefix="/api/v1/translation/engines/{engine_id}/parallel-corpora", tags=["Translation Engines"]
)


@router.get("", response_model=list[ParallelCorpus], response_model_exclude_none=True)
async def list_parallel_corpora(
    engine_id: str, services: ServicesDep, caller: CallerDep
) -> list[ParallelCorpus]:
    base = services.settings.api_base_url
    return [
        parallel_corpus_dto(base, pc)
        for pc in await parallel_corpora.list_parallel_corpora(services, caller, engine_id)
    ]


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=ParallelCorpus, response_model_exclude_none=True
)
async def create_parallel_corpus(
    engine_id: str, config: ParallelCorpusConfig, services: ServicesDep, caller: CallerDep, response: Response
) -> ParallelCorpus:
    pc = await parallel_corpora.create_parallel_corpus(
        services,
        caller,
        engine_id,
        source_corpus_ids=config.source_corpus_ids,
        target_corpus_ids=config.target_corpus_ids,
        name=config.name,
    )
    dto = parallel_corpus_dto(services.settings.api_base_url, pc)
    response.headers["Location"] = dto.url
    return dto


@router.get("/{pc_id}", response_model=ParallelCorpus, response_model_exclude_none=True)
async def get_parallel_corpus(
    engine_id: str, pc_id: str, services: ServicesDep, caller: CallerDep
) -> ParallelCorpus:
    pc = await parallel_corpora.get_parallel_corpus(services, caller, engine_id, pc_id)
    return parallel_corpus_dto(services.settings.api_base_url, pc)


@router.patch("/{pc_id}", response_model=ParallelCorpus, response_model_exclude_none=True)
async def update_parallel_corpus(
    engine_id: str, pc_id: str, config: ParallelCorpusUpdateConfig, services: ServicesDep, caller: CallerDep
) -> ParallelCorpus:
    pc = await parallel_corpora.update_parallel_corpus(
        services,
        caller,
        engine_id,
        pc_id,
        source_corpus_ids=config.source_corpus_ids,
        target_corpus_ids=config.target_corpus_ids,
        name=config.name,
    )
    return parallel_corpus_dto(services.settings.api_base_url, pc)


@router.delete("/{pc_id}", status_code=status.HTTP_200_OK)
async def delete_parallel_corpus(
    engine_id: str, pc_id: str, services: ServicesDep, caller: CallerDep
) -> None:
    await parallel_corpora.delete_parallel_corpus(services, caller, engine_id, pc_id)
