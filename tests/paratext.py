"""Real Paratext projects for tests: zips that sil-machine's ZipParatextProjectSettingsParser and
text corpora read, with USFM books built from the shared eBible verses (tests/helpers.EBIBLE)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable, Mapping
from functools import cache

from tests.helpers import EBIBLE

Verses = dict[tuple[int, int], str]
"""(chapter, verse) → text, in order."""

BOOK_NUMBERS = {"MAT": 41, "MRK": 42, "LUK": 43, "JHN": 44}


@cache
def _lines(translation: str) -> tuple[tuple[str, str], ...]:
    refs = (EBIBLE / "vref.txt").read_text(encoding="utf-8").splitlines()
    texts = (EBIBLE / f"{translation}.txt").read_text(encoding="utf-8").split("\n")
    return tuple(zip(refs, texts, strict=False))


def ebible_verses(translation: str, book: str, chapters: Iterable[int]) -> Verses:
    """The verses of `book`'s `chapters` in an eBible translation (`engwebp`, `swh1850`, …);
    absent and merged verses are left out."""
    wanted = set(chapters)
    found: Verses = {}
    for ref, text in _lines(translation):
        ref_book, chapter_verse = ref.split(" ")
        chapter, verse = (int(n) for n in chapter_verse.split(":"))
        if ref_book == book and chapter in wanted and text.strip() and text.strip() != "<range>":
            found[(chapter, verse)] = text.strip()
    return found


def book_usfm(
    book: str, verses: Verses, *, heading: str | None = None, extras: Mapping[tuple[int, int], str] = {}
) -> str:
    """`\\id`, then per chapter `\\c`, an optional `\\s` heading and `\\p`, then `\\v` lines.
    `extras` appends raw USFM (a footnote, a `\\q2` break, a `\\w` word) to a verse."""
    lines = [f"\\id {book}"]
    chapter = 0
    for (c, v), text in verses.items():
        if c != chapter:
            chapter = c
            lines.append(f"\\c {c}")
            if heading is not None:
                lines.append(f"\\s {heading} {c}")
            lines.append("\\p")
        lines.append(f"\\v {v} {text}{extras.get((c, v), '')}")
    return "\n".join(lines) + "\n"


def project_zip(name: str, language: str, books: Mapping[str, str]) -> bytes:
    """A Paratext project (as its backup zip) holding `books` (book id → USFM), named as Paratext
    names them: `41MAT{name}.SFM`."""
    settings = (
        "<ScriptureText>"
        f"<Name>{name}</Name><FullName>{name} test project</FullName>"
        f"<LanguageIsoCode>{language}:::</LanguageIsoCode>"
        "<Encoding>65001</Encoding><Versification>4</Versification>"
        f'<Naming PrePart="" PostPart="{name}.SFM" BookNameForm="41MAT" />'
        "</ScriptureText>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("Settings.xml", settings)
        for book, usfm in books.items():
            archive.writestr(f"{BOOK_NUMBERS[book]:02d}{book}{name}.SFM", usfm)
    return buffer.getvalue()


def straight_quotes(text: str) -> str:
    """Typographic quotation marks and apostrophes as typewriter ones."""
    return text.translate(str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"}))
