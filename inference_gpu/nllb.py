"""NLLB tokenization with SentencePiece directly, and the words clients see.

The model sees `[src_code, *pieces, "</s>"]`, where the pieces come from the Moses-normalized
segment. Clients see words: source words are surface substrings of the original segment (never
of the normalized text), and every source piece is mapped back to the word it came from. Target
pieces are merged into words, punctuation split off, and `detokenize` joins them into the
translation.
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
from sacremoses import MosesPunctNormalizer
from sentencepiece import sentencepiece_pb2

SP_MODEL = "sentencepiece.bpe.model"
EOS = "</s>"
SPECIAL_TOKENS = frozenset({"<s>", "<pad>", EOS, "<unk>", "<mask>"})
VOCABULARY_FILES = ("shared_vocabulary.json", "shared_vocabulary.txt", "target_vocabulary.json")

_WORD_JOINERS = frozenset("'’ʼ-‐‑\u00ad·\u200c\u200d")
_NUMBER_JOINERS = frozenset(".,:")
_SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf"})
_NO_SPACE_BEFORE = frozenset(",.;:!?)]}%”’»›…")
_NO_SPACE_AFTER = frozenset("([{“‘«‹¿¡")
_AMBIGUOUS_QUOTES = frozenset("\"'")


def _moses() -> MosesPunctNormalizer:
    normalizer = MosesPunctNormalizer()
    normalizer.substitutions = [(re.compile(pattern), sub) for pattern, sub in normalizer.substitutions]
    return normalizer


_MOSES = _moses()


def normalize_punctuation(text: str) -> str:
    """Moses punctuation normalization, as SIL's NLLB pipeline applies it before encoding."""
    return str(_MOSES.normalize(text))


def _is_word_char(char: str) -> bool:
    return unicodedata.category(char)[0] in "LMN" or char == "_"


def _is_separator(char: str) -> bool:
    return char.isspace() or (
        char not in _WORD_JOINERS and unicodedata.category(char) in _SEPARATOR_CATEGORIES
    )


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of `text`: runs of letters, marks and digits (with inner
    apostrophes and hyphens, and `.`/`,`/`:` between digits), and every other visible character
    as a token of its own."""
    spans: list[tuple[int, int]] = []
    i, length = 0, len(text)
    while i < length:
        char = text[i]
        if _is_separator(char):
            i += 1
            continue
        if not _is_word_char(char):
            spans.append((i, i + 1))
            i += 1
            continue
        start = i
        i += 1
        while i < length:
            if _is_word_char(text[i]):
                i += 1
            elif i + 1 < length and _is_word_char(text[i + 1]) and _joins(text[i - 1], text[i], text[i + 1]):
                i += 2
            else:
                break
        spans.append((start, i))
    return spans


def _joins(before: str, joiner: str, after: str) -> bool:
    if joiner in _WORD_JOINERS:
        return True
    return joiner in _NUMBER_JOINERS and before.isdigit() and after.isdigit()


def split_words(text: str) -> list[str]:
    return [text[start:end] for start, end in word_spans(text)]


def detokenize(tokens: list[str]) -> str:
    """Join word tokens: no space before closing punctuation or after opening punctuation;
    straight quotes alternate between opening and closing. `split_words` of the result gives
    the tokens back."""
    parts: list[str] = []
    quote_open = dict.fromkeys(_AMBIGUOUS_QUOTES, False)
    glue_next = True
    for token in tokens:
        if token in _AMBIGUOUS_QUOTES:
            closing = quote_open[token]
            quote_open[token] = not closing
            glue_before, glue_after = closing, not closing
        else:
            glue_before, glue_after = token in _NO_SPACE_BEFORE, token in _NO_SPACE_AFTER
        if parts and not (glue_next or glue_before):
            parts.append(" ")
        parts.append(token)
        glue_next = glue_after
    return "".join(parts)


def normalize_with_origins(text: str) -> tuple[str, list[int]]:
    """`normalize_punctuation(text)`, and for each of its characters the index in `text` of the
    character it came from. Moses' rules are applied one by one while the origins are carried
    along: a replaced character keeps the origin of the same character in the match (so moving a
    comma inside a quote keeps both origins), else of the character it replaces."""
    origins = list(range(len(text)))
    for pattern, replacement in _MOSES.substitutions:
        if pattern.sub(replacement, text) == text:
            continue  # most rules change nothing, and some match every space (" +" → " ")
        parts: list[str] = []
        moved: list[int] = []
        last = 0
        for match in pattern.finditer(text):
            start, end = match.span()
            new = match.expand(replacement) if "\\" in replacement else replacement
            if new == match.group():
                continue
            parts += (text[last:start], new)
            moved += origins[last:start]
            moved += _replacement_origins(text[start:end], origins[start:end], new)
            last = end
        if parts:
            parts.append(text[last:])
            moved += origins[last:]
            text, origins = "".join(parts), moved
    lead = len(text) - len(text.lstrip())
    stripped = text.strip()
    return stripped, origins[lead : lead + len(stripped)]


def _replacement_origins(matched: str, origins: list[int], new: str) -> list[int]:
    unused = list(range(len(matched)))
    visible = next((k for k, char in enumerate(matched) if not char.isspace()), 0)
    result: list[int] = []
    for k, char in enumerate(new):
        same = next((j for j in unused if matched[j] == char), None)
        if same is not None:
            unused.remove(same)
            result.append(origins[same])
        elif len(new) == len(matched):
            result.append(origins[k])
        else:
            result.append(origins[visible])
    return result


@dataclass(frozen=True)
class EncodedSource:
    """A segment as the model sees it (`tokens`) and as clients see it (`words`)."""

    segment: str
    source_code: str
    words: list[str]
    pieces: list[str]
    piece_words: list[int]
    """For each piece, the index of the word it belongs to."""

    @property
    def tokens(self) -> list[str]:
        return [self.source_code, *self.pieces, EOS]


@dataclass(frozen=True)
class DecodedTarget:
    """Target pieces merged into words."""

    tokens: list[str]
    token_pieces: list[list[int]]
    """For each word, the indices of the pieces it overlaps (never empty)."""
    translation: str


class NllbTokenizer:
    def __init__(self, processor: spm.SentencePieceProcessor, vocabulary: list[str] | None = None) -> None:
        self._sp = processor
        self.pieces = frozenset(
            processor.id_to_piece(i)
            for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i) or processor.is_unused(i))
        )
        """The SentencePiece pieces that carry text."""
        self.language_codes = (
            None if vocabulary is None else frozenset(vocabulary) - self.pieces - SPECIAL_TOKENS
        )
        """The language codes the model knows; None when its folder has no vocabulary file."""

    @classmethod
    def from_folder(cls, folder: Path) -> NllbTokenizer:
        """Load `sentencepiece.bpe.model` and, where the folder has one, the CTranslate2 vocabulary."""
        processor = spm.SentencePieceProcessor(model_file=str(folder / SP_MODEL))
        return cls(processor, _read_vocabulary(folder))

    def check_language(self, code: str) -> None:
        codes = self.language_codes
        if codes is not None and code not in codes:
            raise ValueError(f"the model does not know the language code {code!r}")

    def encode(self, segment: str, source_code: str) -> EncodedSource:
        """Normalize, encode and map every piece to a word of the original segment."""
        spans = word_spans(segment)
        if not spans:
            raise ValueError("the segment is empty")
        self.check_language(source_code)
        normalized, to_original = normalize_with_origins(segment)
        proto = sentencepiece_pb2.SentencePieceText.FromString(  # type: ignore[attr-defined]
            self._sp.encode(normalized, out_type="serialized_proto")
        )
        char_of_byte = _char_index_of_bytes(normalized)
        starts = [start for start, _ in spans]
        owners = [
            _owner(normalized, to_original, spans, starts, char_of_byte[piece.begin], char_of_byte[piece.end])
            for piece in proto.pieces
        ]
        return EncodedSource(
            segment=segment,
            source_code=source_code,
            words=[segment[start:end] for start, end in spans],
            pieces=self._sp.id_to_piece([piece.id for piece in proto.pieces]),
            piece_words=_fill_owners(owners),
        )

    def encode_target(self, text: str) -> list[str]:
        """The pieces of target-language text as typed (a prefix to force); no special tokens."""
        return [str(piece) for piece in self._sp.encode(text, out_type=str)]

    def decode(self, pieces: list[str]) -> DecodedTarget:
        """Merge target pieces (language code already stripped) into words. Special tokens
        contribute no text; a piece that is only a word boundary belongs to the next word."""
        text_parts: list[str] = []
        piece_spans: list[tuple[int, int]] = []
        position = 0
        for piece in pieces:
            text = piece.replace("▁", " ") if piece in self.pieces else ""
            text_parts.append(text)
            piece_spans.append((position, position + len(text)))
            position += len(text)
        text = "".join(text_parts)
        tokens: list[str] = []
        token_pieces: list[list[int]] = []
        begins = [begin for begin, _ in piece_spans]
        ends = [end for _, end in piece_spans]
        previous_end = 0
        for start, end in word_spans(text):
            tokens.append(text[start:end])
            token_pieces.append(list(range(bisect_right(ends, previous_end), bisect_left(begins, end))))
            previous_end = end
        return DecodedTarget(tokens=tokens, token_pieces=token_pieces, translation=detokenize(tokens))


def _read_vocabulary(folder: Path) -> list[str] | None:
    for name in VOCABULARY_FILES:
        path = folder / name
        if path.is_file():
            if name.endswith(".json"):
                return [str(token) for token in json.loads(path.read_text(encoding="utf-8"))]
            return path.read_text(encoding="utf-8").splitlines()
    return None


def _char_index_of_bytes(text: str) -> Sequence[int]:
    """For each UTF-8 byte offset of `text` (and its end), the index of the character it is in."""
    if text.isascii():
        return range(len(text) + 1)
    index: list[int] = []
    for i, char in enumerate(text):
        index.extend([i] * len(char.encode("utf-8")))
    index.append(len(text))
    return index


def _owner(
    normalized: str,
    to_original: list[int],
    spans: list[tuple[int, int]],
    starts: list[int],
    begin: int,
    end: int,
) -> int | None:
    """The word of the original segment that the piece covering `normalized[begin:end]` belongs
    to: the word holding its first visible character, or the nearest word after it."""
    for position in range(begin, end):
        if normalized[position].isspace():
            continue
        original = to_original[position]
        word = bisect_right(starts, original) - 1
        if word >= 0 and original < spans[word][1]:
            return word
        return min(word + 1, len(spans) - 1)
    return None


def _fill_owners(owners: list[int | None]) -> list[int]:
    """Pieces with no visible character of their own (a lone `▁`, an inserted character) belong
    to the next piece's word, or the previous one at the end."""
    filled: list[int] = []
    following: int | None = None
    for owner in reversed(owners):
        if owner is not None:
            following = owner
        filled.append(following if following is not None else -1)
    filled.reverse()
    last = 0
    for i, owner in enumerate(filled):
        if owner < 0:
            filled[i] = last
        last = filled[i]
    return filled
