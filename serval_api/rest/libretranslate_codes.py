"""LibreTranslate's language codes ↔ this service's NLLB codes.

LibreTranslate names a language by its ISO 639-1 code where one exists (`en`, `es`, `sw`, `ha`),
by its ISO 639-3 code otherwise, and Chinese as `zh` (Simplified) and `zt` (Traditional).

- **Out** (`libre_code`): an NLLB code gets the shortest such code that reads back as it: a
  language NLLB-200 has in one script gets its bare code (`swh_Latn` → `sw`, `arb_Arab` → `ar`,
  since NLLB-200 serves Swahili and Arabic as those individual languages), a second script of the
  same language gets the script as a BCP-47 subtag (`ace_Latn` → `ace`, `ace_Arab` → `ace-Arab`),
  and a language NLLB-200 does not know (an engine's `quc_Latn`) gets its ISO code all the same.
  Each code reads back as exactly one NLLB code, so no two of a model's languages share one.
- **In** (`nllb_code`): a client's code is read the same way (`resolve_language`, so BCP-47 tags
  such as `pt-BR`, `zh-Hant` and NLLB codes themselves work too), plus LibreTranslate's own `zt`.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache

import langcodes

from serval_common.languages import _INDIVIDUAL_LANGUAGE, resolve_language

TRADITIONAL_CHINESE = "zho_Hant"
SIMPLIFIED_CHINESE = "zho_Hans"
_FIXED = {SIMPLIFIED_CHINESE: "zh", TRADITIONAL_CHINESE: "zt", "tgl_Latn": "tl"}
"""LibreTranslate's own codes where the rule would give another (CLDR reads `tl` as `fil`)."""
_FIXED_IN = {"zt": TRADITIONAL_CHINESE, "zh-tw": TRADITIONAL_CHINESE, "zh-hk": TRADITIONAL_CHINESE}
MAX_CODE_CHARS = 35
"""Longer than any BCP-47 tag a client would send: refused before it is parsed."""
_NAMES = {
    TRADITIONAL_CHINESE: "Chinese (Traditional)",
    SIMPLIFIED_CHINESE: "Chinese",
    "ben_Beng": "Bengali",
    "tgl_Latn": "Tagalog",
}
"""LibreTranslate's names where CLDR's differ."""


@lru_cache(maxsize=4096)
def libre_code(nllb: str) -> str:
    """The LibreTranslate code of an NLLB code (see the module docstring)."""
    fixed = _FIXED.get(nllb)
    if fixed is not None:
        return fixed
    language, _, script = nllb.partition("_")
    for candidate in _candidates(language, script):
        if _reads_as(candidate) == nllb:
            return candidate
    return nllb


def _candidates(language: str, script: str) -> list[str]:
    """Shortest first: the ISO 639-1 codes of the language (or the macrolanguage NLLB-200 serves
    it as), then its ISO 639-3 code; each bare, then with the script."""
    bare: list[str] = []
    for tag in (language, _macrolanguage(language)):
        if tag is None:
            continue
        try:
            parsed = langcodes.Language.get(tag).language
        except (ValueError, langcodes.tag_parser.LanguageTagError):
            continue
        for code in (parsed, tag):
            if code and code not in bare:
                bare.append(code)
    bare.sort(key=len)
    return [*bare, *(f"{code}-{script}" for code in bare if script)]


def _macrolanguage(language: str) -> str | None:
    for macro, individual in _INDIVIDUAL_LANGUAGE.items():
        if individual == language:
            return macro
    return None


def _reads_as(code: str) -> str | None:
    try:
        return resolve_language(code).code
    except ValueError:
        return None


def nllb_code(code: str, available: Collection[str]) -> str | None:
    """The NLLB code among `available` that a client's LibreTranslate code names; None: none."""
    text = code.strip()
    if not text or len(text) > MAX_CODE_CHARS:
        return None
    lowered = text.lower()
    fixed = _FIXED_IN.get(lowered)
    if fixed is not None:
        return fixed if fixed in available else None
    by_code = _by_code(tuple(available))
    if lowered in by_code:
        return by_code[lowered]
    resolved = _reads_as(text)
    return resolved if resolved in available else None


@lru_cache(maxsize=64)
def _by_code(available: tuple[str, ...]) -> dict[str, str]:
    return {libre_code(nllb).lower(): nllb for nllb in available}


@lru_cache(maxsize=4096)
def language_name(nllb: str) -> str:
    """The language's English name (`Swahili`, `Acehnese (Arabic)`); the code when unknown."""
    fixed = _NAMES.get(nllb)
    if fixed is not None:
        return fixed
    code = libre_code(nllb)
    try:
        name = langcodes.Language.get(code).display_name()
    except (ValueError, LookupError, ImportError, langcodes.tag_parser.LanguageTagError):
        return code
    if name.startswith("Unknown language"):
        return code
    return name.replace(" (individual language)", "")


__all__ = ["language_name", "libre_code", "nllb_code"]
