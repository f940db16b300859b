"""StartBuild's `repeated ParallelCorpus corpora`, converted at the edge: the corpora themselves
become the build's catalogue (the export's transport-neutral sources, with their files), and their
`train_on_*` / `pretranslate_*` choices become the service's typed entries (`build_corpora`), the
same model a REST build stores. A parallel corpus id becomes the `corpusId` of its
pretranslations and a file's text id their `textId`, so both are checked against those columns.

Word alignment's StartBuild (`serval.word_alignment.v1`) carries the same corpora with
`word_align_on_*` in place of `pretranslate_*`, on both sides: `build_request(...,
inference=WORD_ALIGN_ON)` turns them into `WordAlignEntry`s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serval.translation.v1 import engine_pb2
from serval.word_alignment.v1 import engine_pb2 as word_alignment_pb2
from serval_api.errors import InvalidArgument
from serval_api.service import limits
from serval_api.service.build_corpora import CorpusFilter, PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.corpus_files import CorpusFileSource, MonolingualSource, ParallelSource
from serval_api.service.files import FileFormat
from serval_api.service.options_json import OptionsNotAnObject
from serval_api.service.options_json import options_object as parse_options

PRETRANSLATE = "pretranslate"
WORD_ALIGN_ON = "word_align_on"

MonolingualCorpus = engine_pb2.MonolingualCorpus | word_alignment_pb2.MonolingualCorpus


@dataclass(frozen=True)
class BuildRequest:
    catalog: list[ParallelSource]
    train_on: list[TrainingEntry]
    pretranslate: list[PretranslateEntry]
    word_align_on: list[WordAlignEntry] = field(default_factory=list)


def build_request(
    corpora: Iterable[engine_pb2.ParallelCorpus | word_alignment_pb2.ParallelCorpus],
    max_items: int,
    *,
    inference: str = PRETRANSLATE,
) -> BuildRequest:
    """`inference`: the prefix of the fields that choose what the build infers on (PRETRANSLATE for
    translation engines, WORD_ALIGN_ON for word-alignment engines)."""
    corpora = list(corpora)
    limits.items("corpora", corpora, max_items)
    request = BuildRequest([], [], [])
    for i, pc in enumerate(corpora):
        where = f"corpora[{i}]"
        limits.optional_segment_name(f"{where}.id", pc.id, limits.CORPUS_ID_CHARS)
        request.catalog.append(
            ParallelSource(
                id=pc.id,
                source=_side(f"{where}.source_corpora", pc.source_corpora, max_items, inference),
                target=_side(f"{where}.target_corpora", pc.target_corpora, max_items, inference),
            )
        )
        train = [_filters(pc.source_corpora, "train_on"), _filters(pc.target_corpora, "train_on")]
        if any(train):
            request.train_on.append(
                TrainingEntry(parallel_corpus_id=pc.id, source_filters=train[0], target_filters=train[1])
            )
        if inference == WORD_ALIGN_ON:
            align = [_filters(pc.source_corpora, inference), _filters(pc.target_corpora, inference)]
            if any(align):
                request.word_align_on.append(
                    WordAlignEntry(parallel_corpus_id=pc.id, source_filters=align[0], target_filters=align[1])
                )
            continue
        pretranslate = _filters(pc.source_corpora, PRETRANSLATE)
        if pretranslate:
            request.pretranslate.append(
                PretranslateEntry(parallel_corpus_id=pc.id, source_filters=pretranslate)
            )
    return request


def _filters(corpora: Sequence[MonolingualCorpus], prefix: str) -> tuple[CorpusFilter, ...]:
    """The filters of the corpora whose `{prefix}_all`, `{prefix}_text_ids` or `{prefix}_chapters`
    choose anything."""
    chosen = []
    for c in corpora:
        everything, text_ids, chapters = _choice(c, prefix)
        if everything or text_ids or chapters:
            chosen.append(_filter(c.id, everything, text_ids, chapters))
    return tuple(chosen)


def _choice(corpus: MonolingualCorpus, prefix: str) -> tuple[bool, Sequence[str], Mapping[str, Any]]:
    return (
        getattr(corpus, f"{prefix}_all"),
        getattr(corpus, f"{prefix}_text_ids"),
        getattr(corpus, f"{prefix}_chapters"),
    )


def _filter(
    corpus_id: str,
    everything: bool,
    text_ids: Sequence[str],
    chapters: Mapping[str, Any],
) -> CorpusFilter:
    """Serval's `…_all`, `…_text_ids` and `…_chapters` of one corpus as an entry's filter (a book
    without chapters is the whole book; runs of chapters become `MAT1-5`)."""
    if everything:
        return CorpusFilter(corpus_id=corpus_id)
    return CorpusFilter(
        corpus_id=corpus_id,
        text_ids=tuple(text_ids) or None,
        scripture_range=";".join(_book_range(book, c.chapters) for book, c in chapters.items()) or None,
    )


def _book_range(book: str, chapters: Iterable[int]) -> str:
    runs: list[list[int]] = []
    for chapter in sorted(set(chapters)):
        if runs and chapter == runs[-1][1] + 1:
            runs[-1][1] = chapter
        else:
            runs.append([chapter, chapter])
    if not runs:
        return book
    return ";".join(f"{book}{first}" if first == last else f"{book}{first}-{last}" for first, last in runs)


def _side(
    field: str, corpora: Sequence[MonolingualCorpus], max_items: int, inference: str
) -> tuple[MonolingualSource, ...]:
    limits.items(field, corpora, max_items)
    return tuple(_monolingual(f"{field}[{i}]", c, max_items, inference) for i, c in enumerate(corpora))


def _monolingual(field: str, corpus: MonolingualCorpus, max_items: int, inference: str) -> MonolingualSource:
    limits.optional_segment_name(f"{field}.id", corpus.id, limits.ID_CHARS)
    limits.text(f"{field}.language", corpus.language, limits.LANGUAGE_TAG_CHARS)
    limits.items(f"{field}.files", corpus.files, max_items)
    for name in ("train_on_text_ids", f"{inference}_text_ids", "train_on_chapters", f"{inference}_chapters"):
        limits.items(f"{field}.{name}", getattr(corpus, name), max_items)
    for name in ("train_on_chapters", f"{inference}_chapters"):
        for book, chapters in getattr(corpus, name).items():
            limits.segment_name(f"{field}.{name} key", book, limits.TEXT_ID_CHARS)
            limits.items(f"{field}.{name}[{book!r}]", chapters.chapters, max_items)
    for i, f in enumerate(corpus.files):
        limits.text(f"{field}.files[{i}].location", f.location, limits.LOCATION_CHARS)
        limits.optional_segment_name(f"{field}.files[{i}].text_id", f.text_id, limits.TEXT_ID_CHARS)
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
    )


def options_object(text: str) -> dict[str, Any] | None:
    """A StartBuild request's `options` JSON text as an object (None when blank); 400 otherwise."""
    if not text.strip():
        return None
    try:
        return parse_options(text)
    except OptionsNotAnObject as e:
        raise InvalidArgument(f"options: {e}") from None
