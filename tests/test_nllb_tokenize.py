from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest
import sentencepiece as spm
from sacremoses import MosesPunctNormalizer

from serval_common.nllb_tokenizer import (
    EOS,
    NllbTokenizer,
    detokenize,
    normalize_punctuation,
    normalize_with_origins,
    split_words,
    word_spans,
)

SEGMENTS = [
    "In the beginning, God.",
    "“Jesus’ words,” he said.",
    "Jesus’ disciples didn’t  go — they   stayed…",
    '"Hello", he said. (Yes)no: 3,000 people; ok?!',
    "  leading and trailing\tspaces  ",
    "‘Peace,’ said the «elder» – 12:30 « quoted »",
]
OTHER_SCRIPTS = [
    "Ἐν ἀρχῇ ἦν ὁ λόγος, “καὶ” ὁ λόγος ἦν πρὸς τὸν θεόν.",
    "आदि में वचन था, और वचन परमेश्वर के साथ था।",
]
"""Outside ASCII after normalization, so a piece's byte offsets are not its character offsets.
The tiny model knows neither script: SentencePiece makes a run of unknown characters one `<unk>`
(`था।` is one piece), so a word may have no piece of its own."""
MERGING = "\u00a0«\u00a0x\u00a0»\u00a0 nº\u00a05 ´´a´´ ''b'' ``c`` 5 % ( z ) : ;"
"""Moses turns two characters (´´, '', ``) into one quote: the second word gets no piece."""


@pytest.fixture(scope="module")
def tokenizer(tiny_ct2_model: Path) -> NllbTokenizer:
    return NllbTokenizer.from_folder(tiny_ct2_model)


@pytest.fixture(scope="module")
def vocabulary(tiny_ct2_model: Path) -> set[str]:
    return set(json.loads((tiny_ct2_model / "shared_vocabulary.json").read_text(encoding="utf-8")))


def test_words_of_a_plain_sentence(tokenizer: NllbTokenizer) -> None:
    source = tokenizer.encode("In the beginning, God.", "eng_Latn")
    assert source.words == ["In", "the", "beginning", ",", "God", "."]
    assert source.tokens == ["eng_Latn", *source.pieces, EOS]
    beginning = [p for p, w in zip(source.pieces, source.piece_words, strict=True) if w == 2]
    assert "".join(beginning).lstrip("▁") == "beginning"


@pytest.mark.parametrize("segment", [*SEGMENTS, MERGING, *OTHER_SCRIPTS])
def test_source_words_are_substrings_of_the_original_in_order(tokenizer: NllbTokenizer, segment: str) -> None:
    source = tokenizer.encode(segment, "eng_Latn")
    position = 0
    for word in source.words:
        found = segment.find(word, position)
        assert found >= 0, word
        assert segment[position:found].strip() == ""
        position = found + len(word)
    assert segment[position:].strip() == ""


@pytest.mark.parametrize("segment", [*SEGMENTS, MERGING, *OTHER_SCRIPTS])
def test_every_piece_maps_to_a_word(tokenizer: NllbTokenizer, vocabulary: set[str], segment: str) -> None:
    source = tokenizer.encode(segment, "eng_Latn")
    assert len(source.piece_words) == len(source.pieces) > 0
    assert all(0 <= w < len(source.words) for w in source.piece_words)
    if segment in SEGMENTS:
        assert set(source.piece_words) == set(range(len(source.words)))
    assert set(source.tokens) <= vocabulary
    for piece, word in zip(source.pieces, source.piece_words, strict=True):
        text = piece.lstrip("▁")
        if text.isalpha():
            assert text in unicodedata.normalize("NFKC", source.words[word]), (piece, source.words[word])


def test_pieces_are_those_of_the_normalized_segment(
    sp_model: spm.SentencePieceProcessor, tokenizer: NllbTokenizer
) -> None:
    segment = "“Jesus’ words,” he said."
    expected = [sp_model.id_to_piece(i) for i in sp_model.encode(normalize_punctuation(segment))]
    assert tokenizer.encode(segment, "eng_Latn").pieces == expected


def test_quotes_and_apostrophes_map_to_their_own_words(tokenizer: NllbTokenizer) -> None:
    source = tokenizer.encode("“Jesus’ words,” he said.", "eng_Latn")
    assert source.words == ["“", "Jesus", "’", "words", ",", "”", "he", "said", "."]
    owners = {source.words[w] for w in source.piece_words}
    assert {"“", "’", "”", ","} <= owners


@pytest.mark.parametrize("segment", [*SEGMENTS, MERGING, *OTHER_SCRIPTS])
def test_normalization_tracks_where_each_character_came_from(segment: str) -> None:
    normalized, origins = normalize_with_origins(segment)
    assert normalized == normalize_punctuation(segment)
    assert len(origins) == len(normalized)
    for char, origin in zip(normalized, origins, strict=True):
        if char.isalnum():
            assert segment[origin] == char


def test_moses_moving_a_comma_inside_quotes_keeps_each_piece_on_its_word(tokenizer: NllbTokenizer) -> None:
    source = tokenizer.encode('"Hello", he said.', "eng_Latn")
    assert normalize_punctuation('"Hello", he said.') == '"Hello," he said.'
    assert source.words == ['"', "Hello", '"', ",", "he", "said", "."]
    comma = source.pieces.index(",")
    assert source.piece_words[comma] == 3
    assert source.piece_words[comma + 1] == 2


def test_empty_segments_and_unknown_codes_are_rejected(tokenizer: NllbTokenizer) -> None:
    with pytest.raises(ValueError):
        tokenizer.encode(" \t ", "eng_Latn")
    with pytest.raises(ValueError):
        tokenizer.encode("Hello", "xyz_Latn")


def test_inner_apostrophes_hyphens_and_numbers_stay_in_words() -> None:
    assert split_words("don't well-known 3,000.5 Jesus’ (x)") == [
        "don't",
        "well-known",
        "3,000.5",
        "Jesus",
        "’",
        "(",
        "x",
        ")",
    ]


def _reference_word_spans(text: str) -> list[tuple[int, int]]:
    """`word_spans`' rules read one character at a time: the specification its regular expression
    must match exactly."""

    def word_char(char: str) -> bool:
        return unicodedata.category(char)[0] in "LMN" or char == "_"

    def separator(char: str) -> bool:
        return char.isspace() or (
            char not in "'’ʼ-‐‑\u00ad·\u200c\u200d"
            and unicodedata.category(char) in {"Zs", "Zl", "Zp", "Cc", "Cf"}
        )

    def joins(before: str, joiner: str, after: str) -> bool:
        return joiner in "'’ʼ-‐‑\u00ad·\u200c\u200d" or (
            joiner in ".,:" and before.isdigit() and after.isdigit()
        )

    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(text):
        if separator(text[i]):
            i += 1
        elif not word_char(text[i]):
            spans.append((i, i + 1))
            i += 1
        else:
            start, i = i, i + 1
            while i < len(text):
                if word_char(text[i]):
                    i += 1
                elif (
                    i + 1 < len(text) and word_char(text[i + 1]) and joins(text[i - 1], text[i], text[i + 1])
                ):
                    i += 2
                else:
                    break
            spans.append((start, i))
    return spans


TRICKY = (
    " \t\n\u00a0\u2009\u200b\u200c\u200d\u00ad\ufeff'’ʼ-‐‑·.,:;0123456789²③٣߁_aZéाि्ं“”«»()—…%\u0301\u0651ـ一"
)
"""Separators, joiners, digits of several kinds (a superscript and a circled digit are digits but
not decimal ones), marks, and punctuation: where the rules' cases meet."""


def _random_texts(count: int) -> list[str]:
    rng = random.Random(21)
    texts = []
    for _ in range(count):
        length = rng.randint(0, 12)
        if rng.random() < 0.6:
            texts.append("".join(rng.choice(TRICKY) for _ in range(length)))
        else:  # any code point but a lone surrogate (never in a protobuf string)
            codes = [rng.choice((rng.randint(0, 0x3000), rng.randint(0, 0x10FFFF))) for _ in range(length)]
            texts.append("".join(chr(c) for c in codes if not 0xD800 <= c <= 0xDFFF))
    return texts


def test_word_spans_follow_the_character_rules_on_any_text() -> None:
    for text in [*SEGMENTS, MERGING, *OTHER_SCRIPTS, *_random_texts(20_000)]:
        assert word_spans(text) == _reference_word_spans(text), repr(text)


def test_normalization_is_moses_own() -> None:
    """The normalizer's rules are compiled once and one is rewritten to find less (`nllb._moses`):
    its output is still exactly Moses'."""
    moses = MosesPunctNormalizer()
    for text in [*SEGMENTS, MERGING, *OTHER_SCRIPTS, "a  b   c ( d )  ,  e", *_random_texts(3_000)]:
        assert normalize_punctuation(text) == moses.normalize(text), repr(text)
        assert normalize_with_origins(text)[0] == moses.normalize(text), repr(text)


def test_detokenize_glues_punctuation() -> None:
    tokens = ["Yesu", "akasema", ",", "“", "Njoo", "!", "”", "(", "kweli", ")", '"', "ndiyo", '"', "."]
    assert detokenize(tokens) == 'Yesu akasema, “Njoo!” (kweli) "ndiyo".'


@pytest.mark.parametrize("segment", SEGMENTS)
def test_detokenize_round_trips_words(segment: str) -> None:
    words = split_words(segment)
    assert split_words(detokenize(words)) == words


def test_target_pieces_merge_into_words(
    sp_model: spm.SentencePieceProcessor, tokenizer: NllbTokenizer
) -> None:
    text = "Yesu akawaambia, “Njooni mwone!” Wakaenda (siku hiyo)."
    pieces = [*map(sp_model.id_to_piece, sp_model.encode(text)), "<unk>", "eng_Latn"]
    target = tokenizer.decode(pieces)
    assert target.tokens == split_words(text)
    assert target.translation == detokenize(target.tokens)
    assert split_words(target.translation) == target.tokens
    assert all(target.token_pieces)
    covered = sorted({i for pieces_of in target.token_pieces for i in pieces_of})
    assert covered == [i for i, piece in enumerate(pieces) if piece in tokenizer.pieces]
    for token, pieces_of in zip(target.tokens, target.token_pieces, strict=True):
        assert token in "".join(pieces[i] for i in pieces_of).replace("▁", " ")


def test_special_tokens_in_the_output_carry_no_text(tokenizer: NllbTokenizer) -> None:
    target = tokenizer.decode(["swh_Latn", "</s>"])
    assert target.tokens == [] and target.translation == ""


@pytest.fixture(scope="module")
def sp_model(tiny_ct2_model: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(tiny_ct2_model / "sentencepiece.bpe.model"))
