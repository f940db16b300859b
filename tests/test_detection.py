"""Language detection for `source: auto` and `/detect` (serval_api/service/detection.py), with the
real detector on verses of the bundled corpus."""

from __future__ import annotations

import pytest

from serval_api.service.detection import detect
from serval_common.languages import NLLB_LANGUAGE_CODES
from tests.helpers import EBIBLE

VERSES = 30


def verses(name: str) -> list[str]:
    lines = [line.strip() for line in (EBIBLE / f"{name}.txt").read_text(encoding="utf-8").splitlines()]
    present = [line for line in lines if line and line != "<range>"]
    return present[:: len(present) // VERSES][:VERSES]


@pytest.mark.parametrize(
    ("corpus", "code"),
    [("engwebp", "eng_Latn"), ("swh1850", "swh_Latn"), ("spaRV1909", "spa_Latn"), ("hauulb", "hau_Latn")],
)
def test_the_bundled_verses_languages_are_detected(corpus: str, code: str) -> None:
    found = [detect(verse, NLLB_LANGUAGE_CODES) for verse in verses(corpus)]
    right = sum(answer[0].language == code for answer in found)
    assert right >= VERSES - 1, f"{right}/{VERSES}"
    for answer in found:
        assert 1 <= len(answer) <= 3
        assert all(0 <= d.confidence <= 100 for d in answer)
        assert [d.confidence for d in answer] == sorted((d.confidence for d in answer), reverse=True)


def test_only_candidates_are_answered_with_the_detectors_own_confidence() -> None:
    swahili = verses("swh1850")[0]
    [only] = detect(swahili, ("eng_Latn",))
    assert only.language == "eng_Latn" and only.confidence < 5, "not re-spread over the candidates"
    assert detect(swahili, ("quc_Latn",)) == [], "a language the detector does not know"


def test_a_script_the_detector_does_not_tell_apart_names_the_candidate() -> None:
    assert detect("這是一個句子，我們在測試。", ("zho_Hant", "eng_Latn"))[0].language == "zho_Hant"
    assert detect("这是一个句子，我们在测试。", ("zho_Hans", "zho_Hant"), 1)[0].language == "zho_Hans"


@pytest.mark.parametrize("text", ["", "12345", "!!!"])
def test_text_without_words_gets_low_confidences(text: str) -> None:
    assert all(d.confidence < 20 for d in detect(text, NLLB_LANGUAGE_CODES))
