"""What a caller will read of a translation, so nobody computes what nobody reads."""

from __future__ import annotations

from enum import StrEnum


class Detail(StrEnum):
    """`FULL`: every field Serval's clients read (per-word confidences from a second scoring pass,
    alignment from attention). `TEXT`: the translation and its words only (SIL Converters'
    dialect and LibreTranslate read nothing more); confidences and alignment are left empty, and
    the node skips the passes that compute them."""

    FULL = "full"
    TEXT = "text"
