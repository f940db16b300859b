"""The verse pairs shipped for the demo and the default tiny base model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class VersePair:
    ref: str
    source: str
    target: str


def demo_pairs() -> list[VersePair]:
    """English–Swahili verse pairs (public domain; see serval_cli/data/NOTICE.md)."""
    text = (Path(__file__).parent / "data" / "eng-swh.tsv").read_text(encoding="utf-8")
    rows = (line.split("\t") for line in text.splitlines() if line)
    return [VersePair(ref, source, target) for ref, source, target in rows]
