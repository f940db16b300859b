from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response, status

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.files_protocol import (
    Corpus,
    CorpusConfig,
    CorpusFileConfig,
    CorpusUpdateConfig,
    corpus_dto,
)
from serval_api.service import corpora
from serval_api.service.corpora import CorpusFileRef

router = APIRouter(prefix="/api/v1/corpora", tags=["Corpora"])


def _refs(files: list[CorpusFileConfig]) -> list[CorpusFileRef]:
    return [CorpusFileRef(file_id=f.file_id, text_id=f.text_id) for f in files]


@router.get("", response_model=list[Corpus], response_model_exclude_none=True)
async def list_corpora(services: ServicesDep, caller: CallerDep) -> list[Corpus]:
    base = services.settings.api_base_url
    return [corpus_dto(base, c) for c in await corpora.list_corpora(services, caller)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Corpus, response_model_exclude_none=True)
async def create_corpus(
    config: CorpusConfig, services: ServicesDep, caller: CallerDep, response: Response
) -> Corpus:
    corpus = await corpora.create_corpus(
        services, caller, language_tag=config.language, files=_refs(config.files), name=config.name
    )
    dto = corpus_dto(services.settings.api_base_url, corpus)
    response.headers["Location"] = dto.url
    return dto


@router.get("/{corpus_id}", response_model=Corpus, response_model_exclude_none=True)
async def get_corpus(corpus_id: str, services: ServicesDep, caller: CallerDep) -> Corpus:
    return corpus_dto(services.settings.api_base_url, await corpora.get_corpus(services, caller, corpus_id))


@router.patch("/{corpus_id}", response_model=Corpus, response_model_exclude_none=True)
async def update_corpus(
    corpus_id: str,
    config: Annotated[
        CorpusUpdateConfig | list[CorpusFileConfig],
        Body(description="Serval's client sends a bare array of files, which replaces the corpus's files"),
    ],
    services: ServicesDep,
    caller: CallerDep,
) -> Corpus:
    if isinstance(config, list):
        config = CorpusUpdateConfig(files=config)
    corpus = await corpora.update_corpus(
        services,
        caller,
        corpus_id,
        language_tag=config.language,
        files=None if config.files is None else _refs(config.files),
        name=config.name,
    )
    return corpus_dto(services.settings.api_base_url, corpus)


@router.delete("/{corpus_id}", status_code=status.HTTP_200_OK)
async def delete_corpus(corpus_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await corpora.delete_corpus(services, caller, corpus_id)
