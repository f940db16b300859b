from __future__ import annotations

import subprocess
import sys

import pytest

from serval_common.languages import NLLB_LANGUAGE_CODES, LanguageInfo, nllb_language_info, resolve_language


def test_code_list_is_nllb_200_in_tokenizer_order() -> None:
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    assert len(NLLB_LANGUAGE_CODES) == 202
    assert list(NLLB_LANGUAGE_CODES) == list(FAIRSEQ_LANGUAGE_CODES)


@pytest.mark.parametrize(
    ("tag", "code"),
    [
        ("en", "eng_Latn"),
        ("sw", "swh_Latn"),
        ("es", "spa_Latn"),
        ("ha", "hau_Latn"),
        ("zh-Hant", "zho_Hant"),
        ("zh", "zho_Hans"),
        ("zh-TW", "zho_Hant"),
        ("pt-BR", "por_Latn"),
        ("ar", "arb_Arab"),
        ("fa", "pes_Arab"),
        ("fa-AF", "prs_Arab"),
        ("ms", "zsm_Latn"),
        ("et", "est_Latn"),
        ("lv", "lvs_Latn"),
        ("mn", "khk_Cyrl"),
        ("ne", "npi_Deva"),
        ("om", "gaz_Latn"),
        ("ps", "pbt_Arab"),
        ("qu", "quy_Latn"),
        ("sq", "als_Latn"),
        ("uz", "uzn_Latn"),
        ("yi", "ydd_Hebr"),
        ("mg", "plt_Latn"),
        ("tl", "tgl_Latn"),
        ("no", "nob_Latn"),
        ("or", "ory_Orya"),
        ("az", "azj_Latn"),
        ("az-Arab", "azb_Arab"),
        ("ku", "kmr_Latn"),
        ("ko", "kor_Hang"),
        ("kor_Kore", "kor_Hang"),
        ("sr", "srp_Cyrl"),
        ("swh", "swh_Latn"),
        ("eng", "eng_Latn"),
        ("eng_Latn", "eng_Latn"),
    ],
)
def test_known_tags_resolve_to_native_codes(tag: str, code: str) -> None:
    info = resolve_language(tag)
    assert info.code == code
    assert info.is_native


@pytest.mark.parametrize("code", NLLB_LANGUAGE_CODES)
def test_every_nllb_code_resolves_to_itself(code: str) -> None:
    info = resolve_language(code)
    assert (info.code, info.is_native) == (code, True)


def test_unknown_language_gets_a_new_code() -> None:
    assert resolve_language("quc") == LanguageInfo(tag="quc", code="quc_Latn", is_native=False)
    assert resolve_language("quc_Latn").code == "quc_Latn"


def test_script_nllb_lacks_gives_a_non_native_code() -> None:
    info = resolve_language("sr-Latn")
    assert (info.code, info.is_native) == ("srp_Latn", False)


def test_tag_is_standardized() -> None:
    assert resolve_language("pt-br").tag == "pt-BR"
    assert resolve_language(" en ").code == "eng_Latn"


@pytest.mark.parametrize("tag", ["", "   ", "not a tag!!", "123", "und", "zzz", "x-foo"])
def test_invalid_tags_raise(tag: str) -> None:
    with pytest.raises(ValueError, match=r"tag|language"):
        resolve_language(tag)


def test_module_imports_no_machine_learning_packages() -> None:
    check = "import sys, serval_common.languages; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# Serval's `LanguageTagServiceTests.cs` (src/Machine/test/Serval.Machine.Translation.Tests/Services):
# the NLLB-200 code its `nmt` engines answer for a tag, and whether it is native.
@pytest.mark.parametrize(
    ("tag", "code", "native"),
    [
        ("es", "spa_Latn", True),
        ("hne", "hne_Deva", True),
        ("ks-Arab", "kas_Arab", True),
        ("srp_Cyrl", "srp_Cyrl", True),
        ("zh", "zho_Hans", True),
        ("zh-Hant", "zho_Hant", True),
        ("zh-TW", "zho_Hant", True),
        ("cmn", "zho_Hans", True),
        ("cmn-Hant", "zho_Hant", True),
        ("ms", "zsm_Latn", True),
        ("arb", "arb_Arab", True),
        ("pes", "pes_Arab", True),
        ("eng", "eng_Latn", True),
        ("eng-Latn", "eng_Latn", True),
        ("en", "eng_Latn", True),
        ("kor", "kor_Hang", True),
        ("kor_Kore", "kor_Hang", True),
        ("unknown", "unknown", False),
        ("xyz-Latn", "xyz_Latn", False),
        ("xyz", "xyz", False),
        ("lif-Limb", "lif_Limb", False),
    ],
)
def test_language_info_answers_as_servals_nmt_engines(tag: str, code: str, native: bool) -> None:
    info = nllb_language_info(tag)
    assert (info.code, info.is_native) == (code, native)


@pytest.mark.parametrize("tag", ["'Invalid Language'", "", "en US", "en/../x", "sw\x00"])
def test_language_info_refuses_what_no_tag_can_be(tag: str) -> None:
    with pytest.raises(ValueError, match="is not a language tag"):
        nllb_language_info(tag)
