"""What a build trains on and pretranslates, whatever transport asked for it.

An entry names an engine corpus (`corpus_id`) or a parallel corpus of the engine
(`parallel_corpus_id`). `text_ids` and `scripture_range` choose the texts of an engine corpus, and
of every corpus of a parallel corpus's side that its side's filters don't replace; a side's
`source_filters` / `target_filters`, when given, name the corpora of that side to use, each with
its own texts (the corpora they leave out take no part).

A client's `corpusId` is Serval's older name, and here it also keeps its earlier meaning: one
that names no engine corpus but a parallel corpus of the engine is that parallel corpus.
`resolve` settles this when the build starts, so a stored entry's `corpus_id` is always an
engine corpus. An engine corpus's side filters are accepted and ignored, as in Serval. Builds store `dump`'s output in `builds.train_on` / `builds.pretranslate` (a
word-alignment build's `wordAlignOn` entries, `WordAlignEntry`, take the `pretranslate` slot).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from serval_api.db.models.build_record import Diagnostic
from serval_api.errors import InvalidArgument
from serval_api.service import diagnostics, limits

SCRIPTURE_RANGE_CHARS = 1000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class CorpusFilter(_Frozen):
    """No `text_ids` and no `scripture_range`: all of the corpus."""

    corpus_id: str
    text_ids: tuple[str, ...] | None = None
    scripture_range: str | None = None


class _Entry(_Frozen):
    corpus_id: str | None = None
    parallel_corpus_id: str | None = None
    text_ids: tuple[str, ...] | None = None
    scripture_range: str | None = None
    source_filters: tuple[CorpusFilter, ...] | None = None

    def side_filters(self) -> dict[str, tuple[CorpusFilter, ...] | None]:
        return {"sourceFilters": self.source_filters}


class PretranslateEntry(_Entry):
    """Pretranslates the source segments whose target segment is missing or empty."""


class TrainingEntry(_Entry):
    target_filters: tuple[CorpusFilter, ...] | None = None

    def side_filters(self) -> dict[str, tuple[CorpusFilter, ...] | None]:
        return {"sourceFilters": self.source_filters, "targetFilters": self.target_filters}


class WordAlignEntry(_Entry):
    """A parallel corpus of a word-alignment engine to align (`wordAlignOn`): the pairs of its
    chosen source and target texts that both have a segment. Stored in `builds.pretranslate`, the
    build's inference slot."""

    target_filters: tuple[CorpusFilter, ...] | None = None

    def side_filters(self) -> dict[str, tuple[CorpusFilter, ...] | None]:
        return {"sourceFilters": self.source_filters, "targetFilters": self.target_filters}


E = TypeVar("E", bound=_Entry)


def check(field: str, entries: Sequence[_Entry] | None, max_items: int) -> None:
    """Limits, and the shape of each entry; whether the corpora exist is `resolve`'s question."""
    limits.items(field, entries or (), max_items)
    for i, entry in enumerate(entries or ()):
        where = f"{field}[{i}]"
        if (entry.corpus_id is None) == (entry.parallel_corpus_id is None):
            raise InvalidArgument(f"{where}: name either a corpusId or a parallelCorpusId")
        for name, value in (("corpusId", entry.corpus_id), ("parallelCorpusId", entry.parallel_corpus_id)):
            if value is not None:
                limits.text(f"{where}.{name}", value, limits.ID_CHARS)
        _check_texts(where, entry.text_ids, entry.scripture_range, max_items)
        for side, filters in entry.side_filters().items():
            limits.items(f"{where}.{side}", filters or (), max_items)
            for j, item in enumerate(filters or ()):
                limits.text(f"{where}.{side}[{j}].corpusId", item.corpus_id, limits.ID_CHARS)
                _check_texts(f"{where}.{side}[{j}]", item.text_ids, item.scripture_range, max_items)


def _check_texts(
    where: str, text_ids: Sequence[str] | None, scripture_range: str | None, max_items: int
) -> None:
    limits.items(f"{where}.textIds", text_ids or (), max_items)
    for k, text_id in enumerate(text_ids or ()):
        limits.segment_name(f"{where}.textIds[{k}]", text_id, limits.TEXT_ID_CHARS)
    limits.optional_text(f"{where}.scriptureRange", scripture_range, SCRIPTURE_RANGE_CHARS)


def resolve(
    field: str,
    entries: Sequence[E] | None,
    *,
    parallel_corpus_ids: Iterable[str],
    engine_corpus_ids: Iterable[str],
) -> list[E] | None:
    """The entries (already `check`ed) with every name looked up: unknown corpora are 400, a
    `corpus_id` that names a parallel corpus becomes its `parallel_corpus_id`, and one that names an
    engine corpus loses its side filters, which Serval ignores there (`ignored_filters` says so)."""
    if entries is None:
        return None
    parallel = set(parallel_corpus_ids)
    engine = set(engine_corpus_ids)
    resolved = []
    for i, entry in enumerate(entries):
        where = f"{field}[{i}]"
        if entry.parallel_corpus_id is not None:
            if entry.parallel_corpus_id not in parallel:
                raise InvalidArgument(f"{where}: unknown parallel corpus {entry.parallel_corpus_id}")
        elif entry.corpus_id in engine:
            entry = entry.model_copy(update=dict.fromkeys(_SIDE_FILTERS & set(type(entry).model_fields)))
        elif entry.corpus_id in parallel:
            entry = entry.model_copy(update={"parallel_corpus_id": entry.corpus_id, "corpus_id": None})
        else:
            raise InvalidArgument(
                f"{where}: unknown corpus {entry.corpus_id}: "
                "neither a corpus nor a parallel corpus of this engine"
            )
        resolved.append(entry)
    return resolved


_SIDE_FILTERS = {"source_filters", "target_filters"}


def ignored_filters(
    field: str, entries: Sequence[_Entry] | None, *, engine_corpus_ids: Iterable[str]
) -> list[Diagnostic]:
    """A warning for each entry (not yet `resolve`d) that names an engine corpus with
    `sourceFilters` / `targetFilters`: Serval accepts and ignores them there (`StartBuild.cs` keeps
    only an engine corpus's `textIds` and `scriptureRange`), and so does `resolve`."""
    engine = set(engine_corpus_ids)
    notes = []
    for i, entry in enumerate(entries or ()):
        if entry.parallel_corpus_id is not None or entry.corpus_id not in engine:
            continue
        named = [side for side, filters in entry.side_filters().items() if filters is not None]
        if named:
            where = f"{field}[{i}]"
            message = (
                f"{where}: corpus {entry.corpus_id} is an engine corpus, so its {' and '.join(named)} "
                "were ignored; choose its texts with textIds or scriptureRange"
            )
            notes.append(diagnostics.ignored_filters(message, field=where, corpus_id=entry.corpus_id))
    return notes


def dump(entries: Sequence[_Entry] | None) -> list[dict[str, Any]] | None:
    """The stored form: snake_case JSON without the fields left out."""
    return None if entries is None else [e.model_dump(mode="json", exclude_none=True) for e in entries]


def load_training(stored: Sequence[Any] | None) -> list[TrainingEntry] | None:
    return None if stored is None else [TrainingEntry.model_validate(e) for e in stored]


def load_pretranslate(stored: Sequence[Any] | None) -> list[PretranslateEntry] | None:
    return None if stored is None else [PretranslateEntry.model_validate(e) for e in stored]


def load_word_align(stored: Sequence[Any] | None) -> list[WordAlignEntry] | None:
    return None if stored is None else [WordAlignEntry.model_validate(e) for e in stored]
