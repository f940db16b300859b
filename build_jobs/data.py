"""The build's parallel corpus: read from the store, checked, split into training and held-out pairs;
and the segments it pretranslates (`read_source_rows`), the rows every family's job translates."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from serval_common.store import ModelStore

Row = dict[str, Any]
"""One pretranslation row as the API service exports it (`translation` the MT output once written)."""


class CorpusError(ValueError):
    """The corpus cannot be trained on; the message says why."""


@dataclass(frozen=True)
class Corpus:
    train: list[tuple[str, str]]
    evaluation: list[tuple[str, str]]
    dropped: int
    """pairs dropped because one side was empty"""


def corpus_keys(build_id: str) -> tuple[str, str]:
    return f"builds/{build_id}/train.src.txt", f"builds/{build_id}/train.trg.txt"


def read_corpus(store: ModelStore, build_id: str, *, eval_share: float, seed: int) -> Corpus:
    source_key, target_key = corpus_keys(build_id)
    sources = _lines(store.read_bytes(source_key))
    targets = _lines(store.read_bytes(target_key))
    return split_corpus(sources, targets, eval_share=eval_share, seed=seed)


def read_pairs(store: ModelStore, build_id: str) -> list[tuple[str, str]]:
    """The build's pairs with text on both sides, in the order the export wrote them (the
    engine's train-segment pairs last, oldest first)."""
    source_key, target_key = corpus_keys(build_id)
    sources = _lines(store.read_bytes(source_key))
    targets = _lines(store.read_bytes(target_key))
    if len(sources) != len(targets):
        raise CorpusError(f"misaligned corpus: {len(sources)} source lines vs {len(targets)} target lines")
    pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets, strict=True)]
    return [(s, t) for s, t in pairs if s and t]


def split_corpus(sources: list[str], targets: list[str], *, eval_share: float, seed: int) -> Corpus:
    if len(sources) != len(targets):
        raise CorpusError(f"misaligned corpus: {len(sources)} source lines vs {len(targets)} target lines")
    pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets, strict=True)]
    kept = [(s, t) for s, t in pairs if s and t]
    if not kept:
        raise CorpusError("empty corpus: no pair has text on both sides; check the build's trainOn corpora")
    if len(kept) < 2:
        raise CorpusError("corpus too small: at least 2 non-empty pairs are needed (1 is held out)")
    order = list(range(len(kept)))
    random.Random(seed).shuffle(order)
    held = max(1, round(len(kept) * eval_share))
    held = min(held, len(kept) - 1)
    held_out = set(order[:held])
    return Corpus(
        train=[p for i, p in enumerate(kept) if i not in held_out],
        evaluation=[p for i, p in enumerate(kept) if i in held_out],
        dropped=len(pairs) - len(kept),
    )


def _lines(data: bytes) -> list[str]:
    text = data.decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def source_key(build_id: str) -> str:
    return f"builds/{build_id}/pretranslate.src.json"


def target_key(build_id: str) -> str:
    return f"builds/{build_id}/pretranslate.trg.json"


def read_source_rows(store: ModelStore, build_id: str) -> list[Row]:
    """The exported rows; none when the build pretranslates nothing (no file)."""
    key = source_key(build_id)
    if not store.exists(key):
        return []
    rows = json.loads(store.read_bytes(key) or b"[]")
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{key} is not a JSON list of rows")
    return rows
