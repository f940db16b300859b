"""NLLB-200 language codes and the mapping from BCP-47 tags to them.

An NLLB code is an ISO 639-3 language code and an ISO 15924 script code (`swh_Latn`). Clients send
BCP-47 tags (`sw`, `zh-Hant`, `pt-BR`); `resolve_language` turns them into NLLB codes, and gives a
language NLLB-200 does not know a new code built the same way, which a fine-tune adds to the model.

Only `langcodes` is needed here: the API service installs no machine-learning packages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import langcodes

# fmt: off
NLLB_LANGUAGE_CODES: tuple[str, ...] = (
    "ace_Arab", "ace_Latn", "acm_Arab", "acq_Arab", "aeb_Arab", "afr_Latn", "ajp_Arab", "aka_Latn",
    "amh_Ethi", "apc_Arab", "arb_Arab", "ars_Arab", "ary_Arab", "arz_Arab", "asm_Beng", "ast_Latn",
    "awa_Deva", "ayr_Latn", "azb_Arab", "azj_Latn", "bak_Cyrl", "bam_Latn", "ban_Latn", "bel_Cyrl",
    "bem_Latn", "ben_Beng", "bho_Deva", "bjn_Arab", "bjn_Latn", "bod_Tibt", "bos_Latn", "bug_Latn",
    "bul_Cyrl", "cat_Latn", "ceb_Latn", "ces_Latn", "cjk_Latn", "ckb_Arab", "crh_Latn", "cym_Latn",
    "dan_Latn", "deu_Latn", "dik_Latn", "dyu_Latn", "dzo_Tibt", "ell_Grek", "eng_Latn", "epo_Latn",
    "est_Latn", "eus_Latn", "ewe_Latn", "fao_Latn", "pes_Arab", "fij_Latn", "fin_Latn", "fon_Latn",
    "fra_Latn", "fur_Latn", "fuv_Latn", "gla_Latn", "gle_Latn", "glg_Latn", "grn_Latn", "guj_Gujr",
    "hat_Latn", "hau_Latn", "heb_Hebr", "hin_Deva", "hne_Deva", "hrv_Latn", "hun_Latn", "hye_Armn",
    "ibo_Latn", "ilo_Latn", "ind_Latn", "isl_Latn", "ita_Latn", "jav_Latn", "jpn_Jpan", "kab_Latn",
    "kac_Latn", "kam_Latn", "kan_Knda", "kas_Arab", "kas_Deva", "kat_Geor", "knc_Arab", "knc_Latn",
    "kaz_Cyrl", "kbp_Latn", "kea_Latn", "khm_Khmr", "kik_Latn", "kin_Latn", "kir_Cyrl", "kmb_Latn",
    "kon_Latn", "kor_Hang", "kmr_Latn", "lao_Laoo", "lvs_Latn", "lij_Latn", "lim_Latn", "lin_Latn",
    "lit_Latn", "lmo_Latn", "ltg_Latn", "ltz_Latn", "lua_Latn", "lug_Latn", "luo_Latn", "lus_Latn",
    "mag_Deva", "mai_Deva", "mal_Mlym", "mar_Deva", "min_Latn", "mkd_Cyrl", "plt_Latn", "mlt_Latn",
    "mni_Beng", "khk_Cyrl", "mos_Latn", "mri_Latn", "zsm_Latn", "mya_Mymr", "nld_Latn", "nno_Latn",
    "nob_Latn", "npi_Deva", "nso_Latn", "nus_Latn", "nya_Latn", "oci_Latn", "gaz_Latn", "ory_Orya",
    "pag_Latn", "pan_Guru", "pap_Latn", "pol_Latn", "por_Latn", "prs_Arab", "pbt_Arab", "quy_Latn",
    "ron_Latn", "run_Latn", "rus_Cyrl", "sag_Latn", "san_Deva", "sat_Beng", "scn_Latn", "shn_Mymr",
    "sin_Sinh", "slk_Latn", "slv_Latn", "smo_Latn", "sna_Latn", "snd_Arab", "som_Latn", "sot_Latn",
    "spa_Latn", "als_Latn", "srd_Latn", "srp_Cyrl", "ssw_Latn", "sun_Latn", "swe_Latn", "swh_Latn",
    "szl_Latn", "tam_Taml", "tat_Cyrl", "tel_Telu", "tgk_Cyrl", "tgl_Latn", "tha_Thai", "tir_Ethi",
    "taq_Latn", "taq_Tfng", "tpi_Latn", "tsn_Latn", "tso_Latn", "tuk_Latn", "tum_Latn", "tur_Latn",
    "twi_Latn", "tzm_Tfng", "uig_Arab", "ukr_Cyrl", "umb_Latn", "urd_Arab", "uzn_Latn", "vec_Latn",
    "vie_Latn", "war_Latn", "wol_Latn", "xho_Latn", "ydd_Hebr", "yor_Latn", "yue_Hant", "zho_Hans",
    "zho_Hant", "zul_Latn",
)
# fmt: on

NLLB_LANGUAGE_CODE_SET = frozenset(NLLB_LANGUAGE_CODES)


def _scripts_by_language() -> dict[str, tuple[str, ...]]:
    scripts: dict[str, tuple[str, ...]] = {}
    for code in NLLB_LANGUAGE_CODES:
        scripts[code[:3]] = (*scripts.get(code[:3], ()), code[4:])
    return scripts


_NLLB_SCRIPTS = _scripts_by_language()

# Macrolanguages (and a few other codes) for which NLLB-200 uses one individual language.
_INDIVIDUAL_LANGUAGE = {
    "ara": "arb",
    "aym": "ayr",
    "aze": "azj",
    "cmn": "zho",
    "din": "dik",
    "fas": "pes",
    "fil": "tgl",
    "ful": "fuv",
    "kau": "knc",
    "kur": "kmr",
    "lav": "lvs",
    "mlg": "plt",
    "mon": "khk",
    "msa": "zsm",
    "nep": "npi",
    "nor": "nob",
    "ori": "ory",
    "orm": "gaz",
    "pus": "pbt",
    "que": "quy",
    "sqi": "als",
    "swa": "swh",
    "tmh": "taq",
    "uzb": "uzn",
    "yid": "ydd",
}
_INDIVIDUAL_LANGUAGE_BY_SCRIPT = {("aze", "Arab"): "azb", ("kur", "Arab"): "ckb"}
# langcodes reads Dari (`prs`) as `fa-AF`.
_INDIVIDUAL_LANGUAGE_BY_TERRITORY = {("fas", "AF"): "prs"}


@dataclass(frozen=True)
class LanguageInfo:
    """`tag` is the standardized BCP-47 form of the requested tag; `is_native` says whether
    NLLB-200 was trained on `code`."""

    tag: str
    code: str
    is_native: bool


def resolve_language(tag: str) -> LanguageInfo:
    """Map a BCP-47 tag (or an NLLB code such as `eng_Latn`) to its NLLB-200 code.

    Raises `ValueError` for a tag that is malformed or names no registered language.
    """
    language = _parse(tag)
    explicit_script = language.script
    likely_script = language.maximize().script or "Latn"
    iso639_3 = _individual_language(_alpha3(language, tag), likely_script, language.territory)
    script = _nllb_script(iso639_3, explicit_script, likely_script)
    code = f"{iso639_3}_{script}"
    return LanguageInfo(tag=language.to_tag(), code=code, is_native=code in NLLB_LANGUAGE_CODE_SET)


_TAG_CHARACTERS = re.compile(r"^[A-Za-z0-9_-]+$")


def check_tag_characters(tag: str) -> None:
    """Refuse (`ValueError`) what no language tag can be: anything but letters, digits, `-` and `_`
    (Serval's `LanguageTagService` refuses such a tag it cannot parse)."""
    if not _TAG_CHARACTERS.match(tag):
        raise ValueError(f"{tag!r} is not a language tag; a tag has only letters, digits, '-' and '_'")


def nllb_language_info(tag: str) -> LanguageInfo:
    """What Serval's `nmt` engines answer about a tag (`LanguageTagService.ConvertToFlores200Code`):
    the NLLB-200 code it resolves to, native when NLLB-200 knows that language in that script. A
    tag of the right characters that names no registered language is not refused: `xyz-Latn` is
    `xyz_Latn` (a script NLLB-200 knows, but not the language), `xyz` or `unknown` the tag itself,
    none of them native. Raises `ValueError` for what no language tag can be (`check_tag_characters`)."""
    check_tag_characters(tag)
    try:
        return resolve_language(tag)
    except ValueError:
        pass
    try:
        language = langcodes.Language.get(tag)
    except ValueError:
        return LanguageInfo(tag=tag, code=tag, is_native=False)
    if language.language and language.script:
        code = f"{language.language}_{language.script}"
        return LanguageInfo(tag=language.to_tag(), code=code, is_native=code in NLLB_LANGUAGE_CODE_SET)
    return LanguageInfo(tag=tag, code=tag, is_native=False)


def _parse(tag: str) -> langcodes.Language:
    text = tag.strip()
    if not text:
        raise ValueError("empty language tag")
    try:
        language = langcodes.Language.get(text)
    except ValueError as error:
        raise ValueError(f"{tag!r} is not a valid BCP-47 language tag: {error}") from None
    if language.language in (None, "und"):
        raise ValueError(f"{tag!r} names no language")
    if not language.is_valid():
        raise ValueError(f"{tag!r} is not a registered BCP-47 language tag")
    return language


def _alpha3(language: langcodes.Language, tag: str) -> str:
    try:
        return language.to_alpha3()
    except LookupError:
        raise ValueError(f"{tag!r} has no ISO 639-3 language code") from None


def _individual_language(iso639_3: str, script: str, territory: str | None) -> str:
    return (
        _INDIVIDUAL_LANGUAGE_BY_SCRIPT.get((iso639_3, script))
        or _INDIVIDUAL_LANGUAGE_BY_TERRITORY.get((iso639_3, territory or ""))
        or _INDIVIDUAL_LANGUAGE.get(iso639_3, iso639_3)
    )


def _nllb_script(iso639_3: str, explicit_script: str | None, likely_script: str) -> str:
    """A tag without a script gets the script NLLB uses for the language where NLLB has only one
    (Korean is `kor_Hang`, not CLDR's likely `Kore`); otherwise the likely script. Korean written
    `Kore` (Hangul with Hanja) is NLLB's `kor_Hang` too, as Serval corrects it."""
    if explicit_script == "Kore" and iso639_3 == "kor":
        return "Hang"
    if explicit_script:
        return explicit_script
    scripts = _NLLB_SCRIPTS.get(iso639_3, ())
    if likely_script in scripts or len(scripts) != 1:
        return likely_script
    return scripts[0]


def knows_all_nllb_languages(codes: Sequence[str]) -> bool:
    return NLLB_LANGUAGE_CODE_SET.issubset(codes)


def describe_languages(codes: Sequence[str], *, shown: int = 10) -> str:
    """A model's languages in words for a listing or an error message: "all 202 NLLB-200
    languages" (and any added), "eng_Latn and swh_Latn", or "12 languages: ace_Arab, …, and 2 more"."""
    if knows_all_nllb_languages(codes):
        extra = [code for code in codes if code not in NLLB_LANGUAGE_CODE_SET]
        added = f" and {', '.join(extra)}" if extra else ""
        return f"all {len(NLLB_LANGUAGE_CODES)} NLLB-200 languages{added}"
    if not codes:
        return "no language"
    if len(codes) <= 2:
        return " and ".join(codes)
    head = ", ".join(codes[:shown])
    more = f", and {len(codes) - shown} more" if len(codes) > shown else ""
    return f"{len(codes)} languages: {head}{more}"


def inference_only_refusal(base_model: str, known: Sequence[str], *codes: str) -> str | None:
    """Why an inference-only build of `base_model` (whose manifest lists `known`) cannot serve the
    language codes `codes`, in one sentence; None when it knows them all. The API service refuses
    such a build when it starts (400) and the build job before it publishes."""
    unknown = [code for code in codes if code not in known]
    if not unknown:
        return None
    return (
        f"base model {base_model!r} does not know {', '.join(unknown)}; it knows "
        f"{describe_languages(known)}, and an inference-only build serves only those: "
        "train on parallel texts to add a language"
    )
