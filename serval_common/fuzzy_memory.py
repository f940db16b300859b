"""A per-engine translation memory that finds the closest earlier source: the retrieval half of
fuzzy-match augmentation (Bulte & Tezcan 2019, "Neural Fuzzy Repair"; docs/learning.md).

A model trained on augmented input reads a source together with the target of its best fuzzy
match, so a pair added here (a verse the translator just confirmed) changes the very next
translation of a similar source. The build job fills a memory with its training pairs, retrieves
each pair's best match among the *other* pairs to augment its training data, and publishes the
memory with the revision (`MEMORY_FILE`); the node loads it with the model and adds every pair
trained on the engine since.

The score is a word-level edit similarity, `1 - edit distance / longer length` over lowercased
words and punctuation marks, as the fuzzy-match scores of translation memories are. RapidFuzz
computes it; to use its bit-parallel string kernels rather than its slower path for sequences,
each distinct word becomes one private code point, so a verse is a short string of "word
characters". A match below `min_score` (0.5, NFR's threshold) is no match.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

MEMORY_FILE = "memory.jsonl"
"""The revision's memory in its model folder: one JSON object per line, `{"source": …, "target": …}`."""

FUZZY_MATCH_INPUT = "fuzzy-match"
"""`Manifest.input_format` of a revision trained on augmented input: it is served with its memory."""

DEFAULT_MIN_SCORE = 0.5

_WORDS = re.compile(r"\w+|[^\w\s]")
_FIRST_CODE = 0x10000
"""Words become code points from here up (the supplementary planes), wrapping past the last one:
a collision of two words past a million distinct ones only blurs a score."""
_CODES = 0x10FFFF - _FIRST_CODE


@dataclass(frozen=True)
class FuzzyMatch:
    source: str
    target: str
    score: float
    """Word-level edit similarity to the query, from `min_score` to 1."""


class TranslationMemory:
    """Source/target pairs and their word strings; a source added again replaces its target."""

    def __init__(
        self, pairs: Iterable[tuple[str, str]] = (), *, min_score: float = DEFAULT_MIN_SCORE
    ) -> None:
        self.min_score = min_score
        self._codes: dict[str, str] = {}
        self._keys: list[str] = []
        self._pairs: list[tuple[str, str]] = []
        self._index: dict[str, int] = {}
        for source, target in pairs:
            self.add(source, target)

    def __len__(self) -> int:
        return len(self._pairs)

    def pairs(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    def _key(self, text: str) -> str:
        codes = self._codes
        out = []
        for word in _WORDS.findall(text.lower()):
            code = codes.get(word)
            if code is None:
                code = codes[word] = chr(_FIRST_CODE + len(codes) % _CODES)
            out.append(code)
        return "".join(out)

    def add(self, source: str, target: str) -> None:
        """Add a pair; one whose source has the same words as an earlier one replaces it."""
        key = self._key(source)
        if not key or not target.strip():
            return
        at = self._index.get(key)
        if at is None:
            self._index[key] = len(self._pairs)
            self._keys.append(key)
            self._pairs.append((source, target))
        else:
            self._pairs[at] = (source, target)

    def best(self, source: str, *, other_than_itself: bool = False) -> FuzzyMatch | None:
        """The pair whose source is closest to `source`, if it scores at least `min_score`.
        `other_than_itself`: never the pair whose source has the same words (what the build job
        trains on: a training pair is never its own match)."""
        query = self._key(source)
        if not query or not self._keys:
            return None
        skip = self._index.get(query) if other_than_itself else None
        found = process.extract(
            query,
            self._keys,
            scorer=Levenshtein.normalized_similarity,
            limit=1 if skip is None else 2,
            score_cutoff=self.min_score,
        )
        for _, score, index in found:
            if index != skip:
                pair_source, pair_target = self._pairs[index]
                return FuzzyMatch(pair_source, pair_target, float(score))
        return None

    def write(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as out:
            for source, target in self._pairs:
                out.write(json.dumps({"source": source, "target": target}, ensure_ascii=False) + "\n")

    @classmethod
    def read(cls, path: Path, *, min_score: float = DEFAULT_MIN_SCORE) -> TranslationMemory:
        pairs = []
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    entry = json.loads(line)
                    pairs.append((str(entry["source"]), str(entry["target"])))
        return cls(pairs, min_score=min_score)
