"""Serval 1.20's verse counts and chapter filters of a build's execution data.

`trainVerseCount`, `pretranslateVerseCount` and `wordAlignVerseCount` say, book → chapter → count,
how many verses of Scripture a build trains on, pretranslates or aligns: a row counts once for
each target ref that is a verse (`MAT 1:1`, `MAT 1:2a`, `MAT 1:2-3`), as Serval's
`PreprocessStats` counts. Rows of Text files (refs `{textId}:{line}`) are no verses, so a build
of Text files only has empty counts. `isTrainFilteredByChapter` (and the pretranslate and
word-align flags) say whether a build's filters chose chapters of a book rather than whole books
or texts (a `scriptureRange` such as `MRK1-3`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from serval_api.db.models.build_record import VerseCount

_LOOKS_LIKE_VERSE = re.compile(r"^[A-Z0-9]{3} \d+:\d")


@dataclass(frozen=True)
class Verse:
    book: str
    chapter: str


def verse_of(ref: str) -> Verse | None:
    """The book and chapter of `ref` when it is a verse of Scripture (sil-machine's
    `ScriptureRef.is_verse`); None for anything else (a Text file's line, a heading, a ref with a
    path)."""
    if not _LOOKS_LIKE_VERSE.match(ref):
        return None
    from machine.corpora import ScriptureRef

    try:
        parsed = ScriptureRef.parse(ref)
    except ValueError:
        return None
    if not parsed.is_verse:
        return None
    return Verse(book=parsed.book, chapter=str(parsed.chapter_num))


def verse_count(target_refs: Iterable[Iterable[object]]) -> VerseCount:
    """Counts over the target refs of each row."""
    counts: VerseCount = {}
    for refs in target_refs:
        for ref in refs:
            verse = verse_of(str(ref))
            if verse is not None:
                chapters = counts.setdefault(verse.book, {})
                chapters[verse.chapter] = chapters.get(verse.chapter, 0) + 1
    return counts


class ChapterChoice(Protocol):
    """A filter that may name chapters: book → chosen chapters (empty: the whole book)."""

    @property
    def chapters(self) -> Mapping[str, frozenset[int]]: ...


def filtered_by_chapter(filters: Iterable[ChapterChoice | None]) -> bool:
    """Whether any filter chose some chapters of a book (Serval's `CheckChapterFilters`)."""
    return any(f is not None and any(f.chapters.values()) for f in filters)
