from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
import sentencepiece as spm

from inference_gpu.nllb import (
    EOS,
    NllbTokenizer,
    detokenize,
    normalize_punctuation,
    normalize_with_origins,
    split_words,
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
