"""LibreTranslate's language codes ↔ NLLB codes (serval_api/rest/libretranslate_codes.py)."""

from __future__ import annotations

import pytest

from serval_api.rest.libretranslate_codes import language_name, libre_code, nllb_code
from serval_common.languages import NLLB_LANGUAGE_CODES

LIBRETRANSLATE = {
    # LibreTranslate's own codes (its language list) and what NLLB-200 serves them as.
    "en": "eng_Latn",
    "es": "spa_Latn",
    "sw": "swh_Latn",
    "ha": "hau_Latn",
    "ar": "arb_Arab",
    "az": "azj_Latn",
    "fa": "pes_Arab",
    "ms": "zsm_Latn",
    "nb": "nob_Latn",
    "sq": "als_Latn",
    "tl": "tgl_Latn",
    "lv": "lvs_Latn",
    "ky": "kir_Cyrl",
    "ga": "gle_Latn",
    "pt": "por_Latn",
    "zh": "zho_Hans",
    "zt": "zho_Hant",
}


def test_every_nllb_code_has_one_code_that_reads_back_as_it() -> None:
    codes = {nllb: libre_code(nllb) for nllb in NLLB_LANGUAGE_CODES}
    assert len(set(codes.values())) == len(codes), "no two NLLB codes share a LibreTranslate code"
    for nllb, code in codes.items():
        assert nllb_code(code, NLLB_LANGUAGE_CODES) == nllb, code
        assert nllb_code(code.upper(), NLLB_LANGUAGE_CODES) == nllb


@pytest.mark.parametrize(("code", "nllb"), LIBRETRANSLATE.items())
def test_libretranslates_codes_are_ours_both_ways(code: str, nllb: str) -> None:
    assert libre_code(nllb) == code
    assert nllb_code(code, NLLB_LANGUAGE_CODES) == nllb


@pytest.mark.parametrize(
    ("nllb", "code"),
    [
        ("ace_Latn", "ace"),
        ("ace_Arab", "ace-Arab"),
        ("kas_Deva", "ks-Deva"),
        ("yue_Hant", "yue"),
        ("acm_Arab", "acm"),
    ],
)
def test_a_second_script_or_an_individual_language_keeps_its_own_code(nllb: str, code: str) -> None:
    assert libre_code(nllb) == code


def test_a_language_nllb_does_not_know_gets_its_iso_code() -> None:
    assert libre_code("quc_Latn") == "quc"
    assert nllb_code("quc", ("eng_Latn", "quc_Latn")) == "quc_Latn"


@pytest.mark.parametrize(
    ("sent", "nllb"),
    [
        ("pt-BR", "por_Latn"),
        ("zh-Hant", "zho_Hant"),
        ("zh-TW", "zho_Hant"),
        ("zh-CN", "zho_Hans"),
        ("eng_Latn", "eng_Latn"),
        (" EN ", "eng_Latn"),
        ("fil", "tgl_Latn"),
        ("swa", "swh_Latn"),
    ],
)
def test_other_spellings_clients_send_are_read(sent: str, nllb: str) -> None:
    assert nllb_code(sent, NLLB_LANGUAGE_CODES) == nllb


@pytest.mark.parametrize(
    "sent", ["", "  ", "xx", "auto", "und", "klingon", "en\x00", "../etc", "e" * 1000, "zt"]
)
def test_codes_naming_no_available_language_are_none(sent: str) -> None:
    assert nllb_code(sent, ("eng_Latn", "spa_Latn")) is None


def test_names_are_english_names() -> None:
    assert language_name("eng_Latn") == "English"
    assert language_name("swh_Latn") == "Swahili"
    assert language_name("zho_Hans") == "Chinese"
    assert language_name("zho_Hant") == "Chinese (Traditional)"
    assert language_name("ace_Arab") == "Acehnese (Arabic)"
    assert language_name("xyz_Latn") == "xyz_Latn", "no name: the code"
