from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.files_protocol import (
    TranslationCorpus,
    TranslationCorpusConfig,
    TranslationCorpusFileConfig,
    TranslationCorpusUpdateConfig,
    engine_corpus_dto,
)
from serval_api.service import engine_corpora
from serval_api.service.corpora import CorpusFileRef

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}/corpora", tags=["Translation Engines"])

DeleteFiles = Annotated[
    bool, Query(alias="delete-files", description="also delete the data files the corpus names")
]


def _refs(files: list[TranslationCorpusFileConfig] | None) -> list[CorpusFileRef] | None:
    return None if files is None else [CorpusFileRef(file_id=f.file_id, text_id=f.text_id) for f in files]


@router.get("", response_model=list[TranslationCorpus], response_model_exclude_none=True)
async def list_engine_corpora(
    engine_id: str, services: ServicesDep, caller: CallerDep
) -> list[TranslationCorpus]:
    base = services.settings.api_base_url
    return [
        engine_corpus_dto(base, c)
        for c in await engine_corpora.list_engine_corpora(services, caller, engine_id)
    ]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TranslationCorpus,
    response_model_exclude_none=True,
)
async def create_engine_corpus(
    engine_id: str,
    config: TranslationCorpusConfig,
    services: ServicesDep,
    caller: CallerDep,
    response: Response,
) -> TranslationCorpus:
    corpus = await engine_corpora.create_engine_corpus(
        services,
        caller,
        engine_id,
        source_language=config.source_language,
        target_language=config.target_language,
        source_files=_refs(config.source_files) or [],
        target_files=_refs(config.target_files) or [],
        name=config.name,
    )
    dto = engine_corpus_dto(services.settings.api_base_url, corpus)
    response.headers["Location"] = dto.url
    return dto


@router.get("/{engine_corpus_id}", response_model=TranslationCorpus, response_model_exclude_none=True)
async def get_engine_corpus(
    engine_id: str, engine_corpus_id: str, services: ServicesDep, caller: CallerDep
) -> TranslationCorpus:
    corpus = await engine_corpora.get_engine_corpus(services, caller, engine_id, engine_corpus_id)
    return engine_corpus_dto(services.settings.api_base_url, corpus)


@router.patch("/{engine_corpus_id}", response_model=TranslationCorpus, response_model_exclude_none=True)
async def update_engine_corpus(
    engine_id: str,
    engine_corpus_id: str,
    config: TranslationCorpusUpdateConfig,
    services: ServicesDep,
    caller: CallerDep,
) -> TranslationCorpus:
    corpus = await engine_corpora.update_engine_corpus(
        services,
        caller,
        engine_id,
        engine_corpus_id,
        source_files=_refs(config.source_files),
        target_files=_refs(config.target_files),
    )
    return engine_corpus_dto(services.settings.api_base_url, corpus)


@router.delete("/{engine_corpus_id}", status_code=status.HTTP_200_OK)
async def delete_engine_corpus(
    engine_id: str,
    engine_corpus_id: str,
    services: ServicesDep,
    caller: CallerDep,
    delete_files: DeleteFiles = False,
) -> None:
    await engine_corpora.delete_engine_corpus(
        services, caller, engine_id, engine_corpus_id, delete_files=delete_files
    )
