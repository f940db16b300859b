"""`trainOn` and `pretranslate` on the wire: Serval's request configs into the service's
`build_corpora` entries, and stored entries back into Serval's response shapes, whose links
(`corpus`, `parallelCorpus` and each filter's required `corpus`) are `{id, url}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serval_api.rest.wire import Model, ResourceLink
from serval_api.service import build_corpora
from serval_api.service.build_corpora import CorpusFilter, PretranslateEntry, TrainingEntry
from serval_api.urls import corpus_url, engine_corpus_url, parallel_corpus_url


class ParallelCorpusFilterConfig(Model):
    """Which texts of one corpus to use: `textIds`, or a `scriptureRange` such as `MAT;MRK1-3`."""

    corpus_id: str
    text_ids: list[str] | None = None
    scripture_range: str | None = None


class PretranslateCorpusConfig(Model):
    """`corpusId` names an engine corpus, or (as before engine corpora) a parallel corpus of the
    engine; `parallelCorpusId` a parallel corpus."""

    corpus_id: str | None = None
    text_ids: list[str] | None = None
    scripture_range: str | None = None
    parallel_corpus_id: str | None = None
    source_filters: list[ParallelCorpusFilterConfig] | None = None


class TrainingCorpusConfig(PretranslateCorpusConfig):
    target_filters: list[ParallelCorpusFilterConfig] | None = None


class ParallelCorpusFilter(Model):
    corpus: ResourceLink
    text_ids: list[str] | None = None
    scripture_range: str | None = None


class PretranslateCorpus(Model):
    corpus: ResourceLink | None = None
    text_ids: list[str] | None = None
    scripture_range: str | None = None
    parallel_corpus: ResourceLink | None = None
    source_filters: list[ParallelCorpusFilter] | None = None


class TrainingCorpus(PretranslateCorpus):
    target_filters: list[ParallelCorpusFilter] | None = None


def training_entries(configs: Sequence[TrainingCorpusConfig] | None) -> list[TrainingEntry] | None:
    if configs is None:
        return None
    return [TrainingEntry(**_common(c), target_filters=corpus_filters(c.target_filters)) for c in configs]


def pretranslate_entries(
    configs: Sequence[PretranslateCorpusConfig] | None,
) -> list[PretranslateEntry] | None:
    return None if configs is None else [PretranslateEntry(**_common(c)) for c in configs]


def _common(config: PretranslateCorpusConfig) -> dict[str, Any]:
    return {
        "corpus_id": config.corpus_id,
        "parallel_corpus_id": config.parallel_corpus_id,
        "text_ids": None if config.text_ids is None else tuple(config.text_ids),
        "scripture_range": config.scripture_range,
        "source_filters": corpus_filters(config.source_filters),
    }


def corpus_filters(configs: Sequence[ParallelCorpusFilterConfig] | None) -> tuple[CorpusFilter, ...] | None:
    if configs is None:
        return None
    return tuple(
        CorpusFilter(
            corpus_id=f.corpus_id,
            text_ids=None if f.text_ids is None else tuple(f.text_ids),
            scripture_range=f.scripture_range,
        )
        for f in configs
    )


def training_corpora(
    base_url: str, engine_id: str, stored: Sequence[Any] | None
) -> list[TrainingCorpus] | None:
    entries = build_corpora.load_training(stored)
    if entries is None:
        return None
    return [
        TrainingCorpus(
            **_links(base_url, engine_id, e),
            target_filters=filter_links(base_url, e.target_filters),
        )
        for e in entries
    ]


def pretranslate_corpora(
    base_url: str, engine_id: str, stored: Sequence[Any] | None
) -> list[PretranslateCorpus] | None:
    entries = build_corpora.load_pretranslate(stored)
    if entries is None:
        return None
    return [PretranslateCorpus(**_links(base_url, engine_id, e)) for e in entries]


def _links(base_url: str, engine_id: str, entry: PretranslateEntry | TrainingEntry) -> dict[str, Any]:
    return {
        "corpus": None
        if entry.corpus_id is None
        else ResourceLink(id=entry.corpus_id, url=engine_corpus_url(base_url, engine_id, entry.corpus_id)),
        "text_ids": None if entry.text_ids is None else list(entry.text_ids),
        "scripture_range": entry.scripture_range,
        "parallel_corpus": None
        if entry.parallel_corpus_id is None
        else ResourceLink(
            id=entry.parallel_corpus_id,
            url=parallel_corpus_url(base_url, engine_id, entry.parallel_corpus_id),
        ),
        "source_filters": filter_links(base_url, entry.source_filters),
    }


def filter_links(base_url: str, filters: Sequence[CorpusFilter] | None) -> list[ParallelCorpusFilter] | None:
    if filters is None:
        return None
    return [
        ParallelCorpusFilter(
            corpus=ResourceLink(id=f.corpus_id, url=corpus_url(base_url, f.corpus_id)),
            text_ids=None if f.text_ids is None else list(f.text_ids),
            scripture_range=f.scripture_range,
        )
        for f in filters
    ]
