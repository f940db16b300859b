"""NLLB tokenization with SentencePiece directly, and the words clients see.

The model sees `[src_code, *pieces, "</s>"]`, where the pieces come from the Moses-normalized
segment. Clients see words: source words are surface substrings of the original segment (never
of the normalized text), and every source piece is mapped back to the word it came from. Target
pieces are merged into words, punctuation split off, and `detokenize` joins them into the
translation.

Node and build-job code share this module; it needs the `node` or `jobs` extra (SentencePiece,
sacremoses), which the API image lacks, so the API service never imports it.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from functools import cache
from itertools import accumulate
from pathlib import Path

try:
    import sentencepiece as spm
    from sacremoses import MosesPunctNormalizer
except ImportError as missing:
    raise ImportError(f"{__name__} needs the node or jobs extra (sentencepiece, sacremoses)") from missing

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


class NllbInputError(ValueError):
    """A segment with no words, or a language code the model does not know: the caller's input, not
    a fault of the tokenizer."""


_SPACE_RUN = " +"
"""A Moses rule (it appears three times) that replaces a run of spaces by one space: it changes text
only where two spaces meet, so it is compiled as `" {2,}"`, which gives the same output but finds
nothing in most text instead of every space (`normalize_with_origins` skips rules that find nothing)."""


def _moses() -> MosesPunctNormalizer:
    normalizer = MosesPunctNormalizer()
    normalizer.substitutions = [
        (re.compile(" {2,}" if pattern == _SPACE_RUN else pattern), sub)
        for pattern, sub in normalizer.substitutions
    ]
    return normalizer


_MOSES = _moses()


def normalize_punctuation(text: str) -> str:
    """Moses punctuation normalization, as SIL's NLLB pipeline applies it before encoding."""
    return str(_MOSES.normalize(text))


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of `text`: runs of letters, marks and digits (with inner
    apostrophes and hyphens, and `.`/`,`/`:` between digits), and every other visible character
    as a token of its own. Whitespace, other separators and invisible format characters (except
    the joiners above) separate words and belong to none."""
    basic, full = _word_patterns()
    pattern = full if _ASTRAL.search(text) else basic
    return [match.span() for match in pattern.finditer(text)]


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


@cache
def _word_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """`word_spans`' rules as regular expressions, with character classes read from `unicodedata`
    (the Unicode version of this Python) once per process (a quarter of a second): one for text
    within the Basic Multilingual Plane, nearly all text, whose classes `re` turns into bitmaps,
    and one for any text. `re` checks a class's characters beyond that plane, and any category in
    it, one range at a time, which made the one for any text about four times slower on verses.
    `tests/test_nllb_tokenize.py` holds the character-by-character rules they must agree with."""
    marks: list[int] = []
    separators: list[int] = []
    digits: list[int] = []
    words: list[int] = []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        if category[0] in "LMN" or char == "_":
            words.append(code)
            if category[0] == "M":
                marks.append(code)
        elif char.isspace() or (category in _SEPARATOR_CATEGORIES and char not in _WORD_JOINERS):
            separators.append(code)
        if char.isdigit():
            digits.append(code)

    def pattern(word: str, below: int) -> re.Pattern[str]:
        digit = f"[{_class([c for c in digits if c < below])}]"
        joiners, number_joiners = (
            re.escape("".join(sorted(chars))) for chars in (_WORD_JOINERS, _NUMBER_JOINERS)
        )
        joiner = f"(?:[{joiners}]|(?<={digit})[{number_joiners}](?={digit}))"
        return re.compile(f"{word}+(?:{joiner}{word}+)*|[^{_class([c for c in separators if c < below])}]")

    basic_plane = 0x10000
    basic_words = f"[{_class([c for c in words if c < basic_plane])}]"
    return pattern(basic_words, basic_plane), pattern(f"[\\w{_class(marks)}]", sys.maxunicode + 1)


def _class(codes: list[int]) -> str:
    """The inside of a character class matching exactly `codes` (sorted), as ranges."""
    parts: list[str] = []
    start = previous = codes[0]
    for code in [*codes[1:], -1]:
        if code != previous + 1:
            first, last = re.escape(chr(start)), re.escape(chr(previous))
            parts.append(first if start == previous else f"{first}-{last}")
            start = code
        previous = code
    return "".join(parts)


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
        if pattern.search(text) is None:
            continue  # most rules find nothing
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
    memory: tuple[str, ...] = ()
    """What a model that reads fuzzy matches reads after the pieces (`with_match`); never words."""

    @property
    def tokens(self) -> list[str]:
        return [self.source_code, *self.pieces, *self.memory, EOS]

    def with_match(self, match_pieces: list[str], target_code: str, max_tokens: int) -> EncodedSource:
        """The source followed by its fuzzy match's target, as a model trained on augmented input
        reads it: `[src_code, *pieces, tgt_code, *match_pieces, </s>]`, the match cut to fit
        `max_tokens` (nothing added when not even one of its pieces fits). The build job trains on
        the same layout (`build_jobs.base_model.tiny.encode_pairs`)."""
        room = max_tokens - len(self.pieces) - 3
        if room < 1 or not match_pieces:
            return self
        return replace(self, memory=(target_code, *match_pieces[:room]))


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
        _word_patterns()  # built here, while the model loads, rather than at its first request
        self.language_codes = (
            None if vocabulary is None else frozenset(vocabulary) - self.pieces - SPECIAL_TOKENS
        )
        """The language codes the model knows; None when its folder has no vocabulary file."""

    @classmethod
    def from_folder(cls, folder: Path) -> NllbTokenizer:
        """Load `sentencepiece.bpe.model` and, where the folder has one, the CTranslate2 vocabulary."""
        processor = spm.SentencePieceProcessor(model_file=str(folder / SP_MODEL))
        return cls(processor, _read_vocabulary(folder))

    def knows_language(self, code: str) -> bool:
        """Whether the model knows `code` (any code, when its folder has no vocabulary file)."""
        return self.language_codes is None or code in self.language_codes

    def check_language(self, code: str) -> None:
        if not self.knows_language(code):
            raise NllbInputError(f"the model does not know the language code {code!r}")

    def encode(self, segment: str, source_code: str) -> EncodedSource:
        """Normalize, encode and map every piece to a word of the original segment."""
        spans = word_spans(segment)
        if not spans:
            raise NllbInputError("the segment is empty")
        self.check_language(source_code)
        normalized, to_original = normalize_with_origins(segment)
        encoded = self._sp.encode(normalized, return_type="offset_mapping")  # character offsets
        word_of = _word_of_characters(spans, len(segment))
        owners = [_owner(normalized, to_original, word_of, begin, end) for begin, end in encoded["offsets"]]
        return EncodedSource(
            segment=segment,
            source_code=source_code,
            words=[segment[start:end] for start, end in spans],
            pieces=self._sp.id_to_piece(encoded["ids"]),  # its "pieces" show an unknown piece's text
            piece_words=_fill_owners(owners),
        )

    def encode_target(self, text: str) -> list[str]:
        """The pieces of target-language text as typed (a prefix to force); no special tokens."""
        return [str(piece) for piece in self._sp.encode(text, out_type=str)]

    def decode(self, pieces: list[str]) -> DecodedTarget:
        """Merge target pieces (language code already stripped) into words. Special tokens
        contribute no text; a piece that is only a word boundary belongs to the next word."""
        known = self.pieces
        texts = [piece.replace("▁", " ") if piece in known else "" for piece in pieces]
        ends = list(accumulate(map(len, texts)))
        begins = [0, *ends[:-1]]
        text = "".join(texts)
        tokens: list[str] = []
        token_pieces: list[list[int]] = []
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


def _word_of_characters(spans: list[tuple[int, int]], length: int) -> list[int]:
    """For each character of the segment, the word it belongs to: its own word, else the nearest
    word after it, else the last word."""
    word_of: list[int] = []
    previous_end = 0
    for word, (_, end) in enumerate(spans):
        word_of += [word] * (end - previous_end)
        previous_end = end
    word_of += [len(spans) - 1] * (length - previous_end)
    return word_of


def _owner(normalized: str, to_original: list[int], word_of: list[int], begin: int, end: int) -> int | None:
    """The word of the original segment that the piece covering `normalized[begin:end]` belongs
    to: the word of its first visible character (see `_word_of_characters`)."""
    for position in range(begin, end):
        if not normalized[position].isspace():
            return word_of[to_original[position]]
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
