"""StartBuild's `repeated ParallelCorpus corpora` as the build export's transport-neutral sources."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from serval.translation.v1 import engine_pb2
from serval_api.service.corpus_export import (
    ALL_TEXTS,
    CorpusFileSource,
    MonolingualSource,
    ParallelSource,
    TextFilter,
)
from serval_api.service.files import FileFormat


def parallel_sources(corpora: Iterable[engine_pb2.ParallelCorpus]) -> list[ParallelSource]:
    return [
        ParallelSource(
            id=pc.id,
            source=tuple(_monolingual(c) for c in pc.source_corpora),
            target=tuple(_monolingual(c) for c in pc.target_corpora),
        )
        for pc in corpora
    ]


def _monolingual(corpus: engine_pb2.MonolingualCorpus) -> MonolingualSource:
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
