"""Which language a text is in, for LibreTranslate's `source: auto` and `/detect`.

The detector is `py3langid` (a maintained fork of langid.py, 140 languages, its model inside the
package): on the bundled verses it was right on 99.8% of whole verses and 94.1% of four-word
pieces of English, Swahili, Spanish and Hausa, loaded in about 1.4 s and took about 0.3 ms a call
(`bench/detection.py`; docs/libretranslate.md has the table). `lingua-language-detector` knows no
Hausa and `cld3-py` was right on 80% of the short pieces only.

Answers name NLLB codes and only the `candidates` given (the languages a key translates from),
best first; a confidence is the detector's own probability (0–100), not re-spread over the
candidates, so a text in a language the key cannot translate scores low instead of looking sure.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from serval_common.languages import resolve_language

MAX_DETECTIONS = 3


@dataclass(frozen=True)
class Detection:
    language: str
    """An NLLB code."""
    confidence: float
    """0–100."""


_identifier: Any = None
_loading = threading.Lock()


def _model() -> Any:
    """The identifier, loaded once (about 1.4 s: the model is decompressed from the package)."""
    global _identifier
    if _identifier is None:
        with _loading:
            if _identifier is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier


@lru_cache(maxsize=512)
def _nllb(label: str) -> str | None:
    try:
        return resolve_language(label).code
    except ValueError:
        return None


def _candidate(label: str, candidates: Collection[str]) -> str | None:
    """The candidate a detector label names: its NLLB code, or the candidate of the same language
    in another script (the detector says `zh` for Traditional Chinese too)."""
    code = _nllb(label)
    if code is None:
        return None
    if code in candidates:
        return code
    same_language = [c for c in candidates if c[:4] == code[:4]]
    return same_language[0] if len(same_language) == 1 else None


def detect(text: str, candidates: Collection[str], limit: int = MAX_DETECTIONS) -> list[Detection]:
    """Up to `limit` of `candidates` (NLLB codes) `text` may be in, best first; none when the
    detector knows none of them. CPU work: call `detect_async` from the event loop."""
    found: list[Detection] = []
    seen: set[str] = set()
    for label, probability in _model().rank(text):
        code = _candidate(str(label), candidates)
        if code is None or code in seen:
            continue
        seen.add(code)
        found.append(Detection(code, round(100 * float(probability), 1)))
        if len(found) >= limit:
            break
    return found


async def detect_async(
    text: str, candidates: Collection[str], limit: int = MAX_DETECTIONS
) -> list[Detection]:
    return await asyncio.to_thread(detect, text, candidates, limit)


__all__ = ["Detection", "detect", "detect_async"]
