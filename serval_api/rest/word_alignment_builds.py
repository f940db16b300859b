"""A word-alignment engine's parallel corpora and builds over REST: the translation services
scoped to word-alignment engines, in Serval's word-alignment shapes."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from serval_api.db.models import WORD_ALIGNMENT_TYPES
from serval_api.rest import engine_routes
from serval_api.rest.deps import ServicesDep, WordAlignmentCallerDep
from serval_api.rest.engine_routes import WORD_ALIGNMENT
from serval_api.rest.word_alignment import TAG
from serval_api.rest.word_alignment_protocol import (
    WordAlignmentBuild,
    WordAlignmentBuildConfig,
    WordAlignmentParallelCorpus,
    WordAlignmentParallelCorpusConfig,
    WordAlignmentParallelCorpusUpdateConfig,
    parallel_corpus_dto,
)
from serval_api.service import parallel_corpora

router = APIRouter(prefix="/api/v1/word-alignment/engines/{engine_id}", tags=[TAG])


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


async def start_build(
    engine_id: str,
    services: ServicesDep,
    caller: WordAlignmentCallerDep,
    response: Response,
    config: WordAlignmentBuildConfig | None = None,
) -> WordAlignmentBuild:
    config = config or WordAlignmentBuildConfig()
    return await engine_routes.start_build(services, caller, engine_id, response, WORD_ALIGNMENT, config)


engine_routes.add_build_routes(router, WORD_ALIGNMENT, start_build)
