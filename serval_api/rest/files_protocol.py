"""The REST wire shapes of data files, corpora, parallel corpora and engine corpora."""

from __future__ import annotations

from serval_api.db.models import CorpusRow, DataFileRow, EngineCorpusRow, ParallelCorpusRow
from serval_api.rest.protocol import Model, ResourceLink
from serval_api.urls import corpus_url, engine_corpus_url, engine_url, file_url, parallel_corpus_url


class DataFile(Model):
    id: str
    url: str
    name: str | None = None
    format: str
    revision: int


class CorpusFileConfig(Model):
    file_id: str
    text_id: str | None = None


class CorpusConfig(Model):
    name: str | None = None
    language: str
    files: list[CorpusFileConfig] = []


class CorpusUpdateConfig(Model):
    name: str | None = None
    language: str | None = None
    files: list[CorpusFileConfig] | None = None


class CorpusFile(Model):
    file: ResourceLink
    text_id: str | None = None


class Corpus(Model):
    id: str
    url: str
    revision: int
    language: str
    name: str | None = None
    files: list[CorpusFile]


class ParallelCorpusConfig(Model):
    name: str | None = None
    source_corpus_ids: list[str]
    target_corpus_ids: list[str]


class ParallelCorpusUpdateConfig(Model):
    name: str | None = None
    source_corpus_ids: list[str] | None = None
    target_corpus_ids: list[str] | None = None


class ParallelCorpus(Model):
    id: str
    url: str
    name: str | None = None
    engine: ResourceLink
    source_corpora: list[ResourceLink]
    target_corpora: list[ResourceLink]


def file_dto(base_url: str, file: DataFileRow) -> DataFile:
    return DataFile(
        id=file.id,
        url=file_url(base_url, file.id),
        name=file.name,
        format=file.format,
        revision=file.revision,
    )


def corpus_dto(base_url: str, corpus: CorpusRow) -> Corpus:
    return Corpus(
        id=corpus.id,
        url=corpus_url(base_url, corpus.id),
        revision=corpus.revision,
        language=corpus.language,
        name=corpus.name,
        files=[
            CorpusFile(
                file=ResourceLink(id=f["fileId"], url=file_url(base_url, f["fileId"])),
                text_id=f.get("textId"),
            )
            for f in corpus.files
        ],
    )


def parallel_corpus_dto(base_url: str, pc: ParallelCorpusRow) -> ParallelCorpus:
    url = engine_url(base_url, pc.engine_id)
    return ParallelCorpus(
        id=pc.id,
        url=parallel_corpus_url(base_url, pc.engine_id, pc.id),
        name=pc.name,
        engine=ResourceLink(id=pc.engine_id, url=url),
        source_corpora=[ResourceLink(id=c, url=corpus_url(base_url, c)) for c in pc.source_corpus_ids],
        target_corpora=[ResourceLink(id=c, url=corpus_url(base_url, c)) for c in pc.target_corpus_ids],
    )


class TranslationCorpusFileConfig(Model):
    file_id: str
    text_id: str | None = None


class TranslationCorpusConfig(Model):
    name: str | None = None
    source_language: str
    target_language: str
    source_files: list[TranslationCorpusFileConfig]
    target_files: list[TranslationCorpusFileConfig]


class TranslationCorpusUpdateConfig(Model):
    source_files: list[TranslationCorpusFileConfig] | None = None
    target_files: list[TranslationCorpusFileConfig] | None = None


class TranslationCorpusFile(Model):
    file: ResourceLink
    text_id: str | None = None


class TranslationCorpus(Model):
    id: str
    url: str
    engine: ResourceLink
    name: str | None = None
    source_language: str
    target_language: str
    source_files: list[TranslationCorpusFile]
    target_files: list[TranslationCorpusFile]


def engine_corpus_dto(base_url: str, corpus: EngineCorpusRow) -> TranslationCorpus:
    url = engine_url(base_url, corpus.engine_id)

    def side(entries: list[dict[str, str]]) -> list[TranslationCorpusFile]:
        return [
            TranslationCorpusFile(
                file=ResourceLink(id=f["fileId"], url=file_url(base_url, f["fileId"])),
                text_id=f.get("textId"),
            )
            for f in entries
        ]

    return TranslationCorpus(
        id=corpus.id,
        url=engine_corpus_url(base_url, corpus.engine_id, corpus.id),
        engine=ResourceLink(id=corpus.engine_id, url=url),
        name=corpus.name,
        source_language=corpus.source_language,
        target_language=corpus.target_language,
        source_files=side(corpus.source_files),
        target_files=side(corpus.target_files),
    )
