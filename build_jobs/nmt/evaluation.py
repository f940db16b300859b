"""Scoring a CTranslate2 model on held-out pairs: chrF and BLEU (sacrebleu), beam 2, batched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from build_jobs.cpu_threads import CPU_THREADS

if TYPE_CHECKING:
    from serval_common.fuzzy_memory import TranslationMemory

BEAM_SIZE = 2
BATCH_SIZE = 32
CHECK_EVERY = 256


@dataclass(frozen=True)
class Scores:
    chrf: float
    bleu: float


@dataclass(frozen=True)
class Translation:
    text: str
    score: float
    """CTranslate2's length-normalized log-probability of the hypothesis."""


class NllbTranslator:
    """A CTranslate2 model behind the node's tokenizer, so what a job scores or pretranslates is
    what the node serves. A code the model does not know reaches CTranslate2 as `<unk>` (the base
    model before codes are added)."""

    def __init__(self, ct2_dir: Path, *, device: str = "cpu", intra_threads: int = CPU_THREADS) -> None:
        import ctranslate2

        from serval_common.nllb_tokenizer import NllbTokenizer

        self._tokenizer = NllbTokenizer.from_folder(ct2_dir)
        self._translator = ctranslate2.Translator(str(ct2_dir), device=device, intra_threads=intra_threads)

    def translate(
        self,
        sources: Sequence[str],
        source_code: str,
        target_code: str,
        *,
        beam_size: int,
        max_batch_size: int,
        max_length: int = 128,
        matches: Sequence[str | None] | None = None,
    ) -> list[Translation]:
        """`matches`: for each source the target of its fuzzy match (None: none), for a model that
        reads fuzzy matches (`Manifest.input_format`); the match follows the source as the node
        puts it (`EncodedSource.with_match`), within `max_length` tokens."""
        targets = [None] * len(sources) if matches is None else list(matches)
        batch = [
            self._tokens(source, match, source_code, target_code, max_length)
            for source, match in zip(sources, targets, strict=True)
        ]
        results = self._translator.translate_batch(
            batch,
            target_prefix=[[target_code]] * len(batch),
            beam_size=beam_size,
            max_batch_size=max_batch_size,
            max_decoding_length=max_length,
            return_scores=True,
        )
        out = []
        for result in results:
            pieces = [p for p in result.hypotheses[0] if p not in (target_code, "</s>")]
            out.append(Translation(self._tokenizer.decode(pieces).translation, result.scores[0]))
        return out

    def _tokens(
        self, source: str, match: str | None, source_code: str, target_code: str, max_length: int
    ) -> list[str]:
        """What the model reads: the node's encoding, or (an empty source, or a code the model
        does not know yet) the bare pieces; the source cut to `max_length` when no match fits."""
        from serval_common.nllb_tokenizer import EOS, EncodedSource

        tokenizer = self._tokenizer
        if source.strip() and tokenizer.knows_language(source_code):
            encoded = tokenizer.encode(source, source_code)
        else:
            encoded = EncodedSource(source, source_code, [], tokenizer.encode_target(source), [])
        if match is not None:
            encoded = encoded.with_match(tokenizer.encode_target(match), target_code, max_length)
        tokens = encoded.tokens
        if len(tokens) > max_length:
            return [source_code, *encoded.pieces[: max_length - 2], EOS]
        return tokens


def match_targets(
    memory: TranslationMemory,
    sources: Sequence[str],
    *,
    other_than_itself: bool = False,
    check: Callable[[], None] | None = None,
) -> list[str | None]:
    """The target of each source's best fuzzy match in `memory`, None where none scores
    `memory.min_score`. `other_than_itself`: never the pair of the source itself (the training
    pairs' matches, from a memory of the training pairs). `check` (which raises to stop) is called
    every `CHECK_EVERY` sources: each search reads the whole memory, so a build's pairs take
    minutes (some 20 s for 7,500 verse pairs on one core, growing with their square)."""
    targets: list[str | None] = []
    for index, source in enumerate(sources):
        if check is not None and index % CHECK_EVERY == 0:
            check()
        match = memory.best(source, other_than_itself=other_than_itself)
        targets.append(None if match is None else match.target)
    return targets


def translate_all(
    ct2_dir: Path,
    sources: Sequence[str],
    source_code: str,
    target_code: str,
    *,
    max_length: int = 128,
    matches: Sequence[str | None] | None = None,
) -> list[str]:
    translator = NllbTranslator(ct2_dir)
    translations = translator.translate(
        sources,
        source_code,
        target_code,
        beam_size=BEAM_SIZE,
        max_batch_size=BATCH_SIZE,
        max_length=max_length,
        matches=matches,
    )
    return [t.text for t in translations]


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    import sacrebleu

    refs = [list(references)]
    return Scores(
        chrf=sacrebleu.corpus_chrf(list(hypotheses), refs).score,
        bleu=sacrebleu.corpus_bleu(list(hypotheses), refs).score,
    )


def evaluate(
    ct2_dir: Path,
    pairs: Sequence[tuple[str, str]],
    source_code: str,
    target_code: str,
    *,
    matches: Sequence[str | None] | None = None,
) -> Scores:
    """Score the model on `pairs`; `matches`: each source's fuzzy-match target, for a model that
    reads them."""
    hypotheses = translate_all(ct2_dir, [s for s, _ in pairs], source_code, target_code, matches=matches)
    return score(hypotheses, [t for _, t in pairs])
