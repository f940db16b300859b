"""StartBuild's `repeated ParallelCorpus corpora` as the build export's transport-neutral sources,
checked against the request limits: a parallel corpus id becomes the `corpusId` of its
pretranslations and a file's text id their `textId`, so both fit those columns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from serval.translation.v1 import engine_pb2
from serval_api.service import limits
from serval_api.service.corpus_export import (
    ALL_TEXTS,
    CorpusFileSource,
    MonolingualSource,
    ParallelSource,
    TextFilter,
)
from serval_api.service.files import FileFormat


def parallel_sources(corpora: Iterable[engine_pb2.ParallelCorpus], max_items: int) -> list[ParallelSource]:
    corpora = list(corpora)
    limits.items("corpora", corpora, max_items)
    sources = []
    for i, pc in enumerate(corpora):
        where = f"corpora[{i}]"
        limits.text(f"{where}.id", pc.id, limits.CORPUS_ID_CHARS)
        sources.append(
            ParallelSource(
                id=pc.id,
                source=_side(f"{where}.source_corpora", pc.source_corpora, max_items),
                target=_side(f"{where}.target_corpora", pc.target_corpora, max_items),
            )
        )
    return sources


def _side(
    field: str, corpora: Sequence[engine_pb2.MonolingualCorpus], max_items: int
) -> tuple[MonolingualSource, ...]:
    limits.items(field, corpora, max_items)
    return tuple(_monolingual(f"{field}[{i}]", c, max_items) for i, c in enumerate(corpora))


def _monolingual(field: str, corpus: engine_pb2.MonolingualCorpus, max_items: int) -> MonolingualSource:
    limits.text(f"{field}.id", corpus.id, limits.ID_CHARS)
    limits.text(f"{field}.language", corpus.language, limits.LANGUAGE_TAG_CHARS)
    limits.items(f"{field}.files", corpus.files, max_items)
    for name in ("train_on_text_ids", "pretranslate_text_ids", "train_on_chapters", "pretranslate_chapters"):
        limits.items(f"{field}.{name}", getattr(corpus, name), max_items)
    for name in ("train_on_chapters", "pretranslate_chapters"):
        for book, chapters in getattr(corpus, name).items():
            limits.text(f"{field}.{name} key", book, limits.TEXT_ID_CHARS)
            limits.items(f"{field}.{name}[{book!r}]", chapters.chapters, max_items)
    for i, f in enumerate(corpus.files):
        limits.text(f"{field}.files[{i}].location", f.location, limits.LOCATION_CHARS)
        limits.text(f"{field}.files[{i}].text_id", f.text_id, limits.TEXT_ID_CHARS)
    return MonolingualSource(
        id=corpus.id,
        language=corpus.language,
        files=tuple(
            CorpusFileSource(
                location=f.location,
                format=FileFormat.PARATEXT
                if f.format == engine_pb2.FILE_FORMAT_PARATEXT
                else FileFormat.TEXT,
                text_id=f.text_id,
            )
            for f in corpus.files
        ),
        train=_filter(corpus.train_on_all, corpus.train_on_text_ids, corpus.train_on_chapters),
        pretranslate=_filter(
            corpus.pretranslate_all, corpus.pretranslate_text_ids, corpus.pretranslate_chapters
        ),
    )


def _filter(
    everything: bool, text_ids: Iterable[str], chapters: Mapping[str, engine_pb2.ScriptureChapters]
) -> TextFilter | None:
    if everything:
        return ALL_TEXTS
    ids = frozenset(text_ids)
    if not ids and not chapters:
        return None
    return TextFilter(text_ids=ids, chapters={book: frozenset(c.chapters) for book, c in chapters.items()})
