"""The translation memory that fuzzy-match augmentation retrieves from (serval_common/fuzzy_memory.py):
word-level scores, the threshold, a training pair never matching itself, replacement, any script,
and the file a revision publishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from serval_common.fuzzy_memory import TranslationMemory
from tests.helpers import verse_pairs

WORD = ("In the beginning was the Word.", "Hapo mwanzo kulikuwako Neno.")
LIGHT = ("The light shines in the darkness.", "Nuru yang'aa gizani.")


def test_the_closest_source_above_the_threshold_is_found_with_its_word_level_score() -> None:
    memory = TranslationMemory([WORD, LIGHT])
    match = memory.best("In the beginning was the light.")
    assert match is not None and match.target == WORD[1]
    assert match.score == pytest.approx(6 / 7)  # 7 tokens each, one word replaced
    assert memory.best("Blessed are the poor in spirit, for theirs is the kingdom.") is None


def test_case_and_spacing_do_not_change_the_score() -> None:
    memory = TranslationMemory([WORD])
    match = memory.best("  in THE beginning   was the word . ")
    assert match is not None and match.score == 1.0


def test_a_pair_is_never_its_own_match_when_asked_for_another() -> None:
    memory = TranslationMemory([WORD, ("In the beginning was the Word of God.", "Neno la Mungu.")])
    assert memory.best(WORD[0]) == memory.best(WORD[0], other_than_itself=False)
    assert memory.best(WORD[0]).target == WORD[1]  # type: ignore[union-attr]
    other = memory.best(WORD[0], other_than_itself=True)
    assert other is not None and other.target == "Neno la Mungu."
    assert TranslationMemory([WORD]).best(WORD[0], other_than_itself=True) is None


def test_a_source_added_again_replaces_its_target_and_blank_pairs_are_ignored() -> None:
    memory = TranslationMemory([WORD])
    memory.add("in the beginning  was the word.", "Mwanzo kulikuwa na Neno.")
    memory.add("   ", "nothing")
    memory.add("Something", "  ")
    assert len(memory) == 1
    assert memory.best(WORD[0]).target == "Mwanzo kulikuwa na Neno."  # type: ignore[union-attr]


def test_words_of_any_script_are_matched() -> None:
    memory = TranslationMemory([("Ыҫа вӗсене каланӑ: кайӑр", "x"), ("耶稣 对 他们 说 去 吧", "y")])
    assert memory.best("Ыҫа вӗсене каланӑ: тӑрӑр").target == "x"  # type: ignore[union-attr]
    assert memory.best("耶稣 对 他们 说 来 吧").target == "y"  # type: ignore[union-attr]


def test_the_published_file_reads_back_the_same_pairs(tmp_path: Path) -> None:
    sources, targets = verse_pairs("engwebp", "quctt", 50)
    memory = TranslationMemory(zip(sources, targets, strict=True))
    memory.add("A line\twith a tab\nand a newline", 'ꞌ "quoted"')
    memory.write(tmp_path / "memory.jsonl")
    again = TranslationMemory.read(tmp_path / "memory.jsonl")
    assert again.pairs() == memory.pairs()
    assert again.best(sources[7]).target == targets[7]  # type: ignore[union-attr]
