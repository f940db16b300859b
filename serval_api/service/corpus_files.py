"""The corpora a build reads and their files: the corpus descriptions the build export chooses
from (`ParallelSource`, its sides' `MonolingualSource`s and their `CorpusFileSource`s, each side
carrying the `TextFilter`s chosen of it), and reading Text and Paratext files into rows, or a
corpus's whole target side for quotation-mark detection (`target_text`).

Segments are keyed by (textId, ref). A Text file's ref is `{textId}:{lineNumber}` (1-based);
a Paratext zip's text ids are book ids and its refs verse references (`MAT 1:1`), read with
SIL's `sil-machine`. Several corpora on one side merge (`segments`), the first non-empty segment
winning. Choosing the corpora is `build_catalog.py`'s, pairing their segments
`build_segments.py`'s, and writing the build files `corpus_export.py`'s.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serval_api.errors import InvalidArgument, concealed, outage
from serval_api.service.file_contents import Downloads
from serval_api.service.files import FileFormat
from serval_common.store import StoreError

log = logging.getLogger(__name__)

PARALLEL_CORPUS = "parallel corpus"
ENGINE_CORPUS = "corpus"
"""`ParallelSource.kind` of an engine corpus: one source and one target side, both its own id."""

FILE_LOCATION = re.compile(r"^files/([^/]+)(?:/contents)?$")


@dataclass(frozen=True)
class TextFilter:
    """Which texts (and, for Scripture, which chapters of a book) to use; `everything` uses all."""

    everything: bool = False
    text_ids: frozenset[str] = frozenset()
    chapters: dict[str, frozenset[int]] = field(default_factory=dict)

    def admits(self, text_id: str, chapter: int | None) -> bool:
        if self.everything or text_id in self.text_ids:
            return True
        if text_id not in self.chapters:
            return False
        wanted = self.chapters[text_id]
        return not wanted or chapter is None or chapter in wanted


@dataclass(frozen=True)
class CorpusFileSource:
    location: str
    format: FileFormat
    text_id: str


@dataclass(frozen=True)
class MonolingualSource:
    """`train` / `pretranslate`: the texts chosen for that; None: the corpus takes no part in it."""

    id: str
    language: str
    files: tuple[CorpusFileSource, ...]
    train: TextFilter | None = None
    pretranslate: TextFilter | None = None


@dataclass(frozen=True)
class ParallelSource:
    """`id` becomes the `corpusId` of its pretranslations; `kind` (PARALLEL_CORPUS or ENGINE_CORPUS)
    says which entries name it, and names it in warnings."""

    id: str
    source: tuple[MonolingualSource, ...]
    target: tuple[MonolingualSource, ...]
    kind: str = PARALLEL_CORPUS


@dataclass(frozen=True)
class Row:
    text_id: str
    ref: str
    chapter: int | None
    text: str


def segments(
    reader: FileReader,
    sides: tuple[MonolingualSource, ...],
    choose: Callable[[MonolingualSource], TextFilter | None],
) -> dict[tuple[str, str], Row]:
    merged: dict[tuple[str, str], Row] = {}
    for corpus in sides:
        wanted = choose(corpus)
        if wanted is None:
            continue
        for file in corpus.files:
            for row in reader.rows(file):
                if row.text.strip() and wanted.admits(row.text_id, row.chapter):
                    merged.setdefault((row.text_id, row.ref), row)
    return merged


def target_text(reader: FileReader, pc: ParallelSource) -> dict[str, Any]:
    """Paratext books as USFM, since sil-machine's quote convention detector reads USFM; Text
    files as their lines."""
    books: list[dict[str, str]] = []
    texts: list[dict[str, Any]] = []
    for corpus in pc.target:
        for file in corpus.files:
            if file.format == FileFormat.PARATEXT:
                books.extend({"textId": book, "usfm": usfm} for book, usfm in reader.usfm_books(file))
            else:
                texts.append({"textId": file.text_id, "segments": [row.text for row in reader.rows(file)]})
    return {"corpusId": pc.id, "books": books, "texts": texts}


class FileReader:
    """Downloads each file once (a data file from the database, `ContentsReader`) and parses it
    into rows."""

    def __init__(self, store: Downloads, folder: Path) -> None:
        self._store = store
        self._folder = folder
        self._rows: dict[CorpusFileSource, list[Row]] = {}
        self._paths: dict[str, Path] = {}

    def rows(self, file: CorpusFileSource) -> list[Row]:
        if file not in self._rows:
            path = self._path(file)
            if file.format == FileFormat.TEXT:
                self._rows[file] = list(_text_rows(path, file.text_id))
            else:
                self._rows[file] = list(_paratext_rows(path, _file_name(file)))
        return self._rows[file]

    def usfm_books(self, file: CorpusFileSource) -> list[tuple[str, str]]:
        return _paratext_books(self._path(file), _file_name(file))

    def _path(self, file: CorpusFileSource) -> Path:
        if file.location not in self._paths:
            path = self._folder / f"{len(self._paths)}"
            try:
                self._store.download_file(file.location, path)
            except StoreError as e:
                raise outage(e, log) or concealed(
                    InvalidArgument, f"corpus file {_file_name(file)} cannot be read", e, log
                ) from None
            self._paths[file.location] = path
        return self._paths[file.location]


def _file_name(file: CorpusFileSource) -> str:
    match = FILE_LOCATION.match(file.location)
    return match.group(1) if match else repr(file.text_id)


def _text_rows(path: Path, text_id: str) -> Iterator[Row]:
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        for number, line in enumerate(f, start=1):
            yield Row(text_id, f"{text_id}:{number}", None, line.rstrip("\r\n"))


def _unreadable_paratext(name: str, e: Exception) -> InvalidArgument:
    return concealed(InvalidArgument, f"Paratext file {name} could not be read as a Paratext project", e, log)


def _paratext_rows(path: Path, name: str) -> Iterator[Row]:
    from machine.corpora import ParatextBackupTextCorpus

    try:
        corpus = ParatextBackupTextCorpus(str(path))
        for row in corpus.get_rows():
            yield Row(row.text_id, str(row.ref), row.ref.chapter_num, row.text)
    except Exception as e:
        raise _unreadable_paratext(name, e) from None


def _paratext_books(path: Path, file_name: str) -> list[tuple[str, str]]:
    """(book id, USFM) of each book a Paratext project zip holds, in canonical order."""
    import zipfile

    from machine.corpora import ZipParatextProjectSettingsParser
    from machine.scripture.canon import get_scripture_books

    try:
        with zipfile.ZipFile(path) as archive:
            settings = ZipParatextProjectSettingsParser(archive).parse()
            names = set(archive.namelist())
            return [
                (book, archive.read(name).decode(settings.encoding, errors="replace"))
                for book in get_scripture_books()
                if (name := settings.get_book_file_name(book)) in names
            ]
    except Exception as e:
        raise _unreadable_paratext(file_name, e) from None
