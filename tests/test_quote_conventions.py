"""The build job's quotation-mark convention detection (build_jobs.quotes) on real Bible text."""

from __future__ import annotations

import json
from pathlib import Path

from build_jobs.quotes import detect, read_target_texts, target_texts_key, text_usfm
from serval_common.store import open_store
from tests.paratext import book_usfm, ebible_verses, straight_quotes

CHAPTERS = (1, 2, 3, 4, 5)


def books(translation: str) -> list[dict[str, str]]:
    return [{"textId": "MAT", "usfm": book_usfm("MAT", ebible_verses(translation, "MAT", CHAPTERS))}]


def test_typographic_english_is_standard_english() -> None:
    detection = detect([{"corpusId": "web", "books": books("engwebp")}])
    assert detection.convention == "standard_english"
    assert [(c.corpus_id, c.convention) for c in detection.corpora] == [("web", "standard_english")]
    assert detection.score > 0.8


def test_straight_quotes_are_typewriter_english() -> None:
    usfm = straight_quotes(books("engwebp")[0]["usfm"])
    detection = detect([{"corpusId": "web", "books": [{"textId": "MAT", "usfm": usfm}]}])
    assert detection.convention == "typewriter_english"


def test_text_without_quotation_marks_has_no_convention() -> None:
    detection = detect([{"corpusId": "rv", "books": books("spaRV1909")}])
    assert detection.convention is None and detection.score == 0.0
    assert [(c.corpus_id, c.convention) for c in detection.corpora] == [("rv", None)]
    assert detect([]).convention is None
    assert detect([{"corpusId": "empty", "books": [], "texts": []}]).corpora[0].convention is None


def test_text_file_lines_are_read_as_verses() -> None:
    lines = list(ebible_verses("swh1850", "MAT", CHAPTERS).values())
    detection = detect([{"corpusId": "swh", "texts": [{"textId": "MAT", "segments": lines}]}])
    assert detection.convention == "standard_english"
    assert text_usfm(["a \\b", "c"]) == "\\id XXA\n\\c 1\n\\p\n\\v 1 a b\n\\v 2 c\n", "no stray markers"


def test_each_corpus_gets_its_own_and_the_engine_the_combined_convention() -> None:
    detection = detect(
        [
            {"corpusId": "web", "books": books("engwebp")},
            {"corpusId": "rv", "books": books("spaRV1909")},
            {"corpusId": "plain", "texts": [{"textId": "x", "segments": ["no quotes here", "nor here"]}]},
        ]
    )
    assert [(c.corpus_id, c.convention) for c in detection.corpora] == [
        ("web", "standard_english"),
        ("rv", None),
        ("plain", None),
    ]
    assert detection.convention == "standard_english", "the corpora without quotes do not vote"


def test_read_target_texts(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    assert read_target_texts(store, "b1") is None, "an export without the file: nothing to report"
    entries = [{"corpusId": "pc", "books": books("engwebp"), "texts": []}]
    store.write_bytes(target_texts_key("b1"), json.dumps(entries).encode())
    assert read_target_texts(store, "b1") == entries
