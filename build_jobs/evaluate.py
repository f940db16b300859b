"""Scoring a CTranslate2 model on held-out pairs: chrF and BLEU (sacrebleu), beam 2, batched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from build_jobs.cpu_threads import CPU_THREADS

BEAM_SIZE = 2
BATCH_SIZE = 32


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

        from inference_gpu.nllb import NllbTokenizer

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
    ) -> list[Translation]:
        tokenizer = self._tokenizer
        batch = [[source_code, *tokenizer.encode(s, source_code).pieces[: max_length - 2], "</s>"]
                 if s.strip() and _knows(tokenizer, source_code)
                 else [source_code, *tokenizer.encode_target(s)[: max_length - 2], "</s>"]
                 for s in sources]  # fmt: skip
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
            out.append(Translation(tokenizer.decode(pieces).translation, result.scores[0]))
        return out


def translate_all(
    ct2_dir: Path, sources: Sequence[str], source_code: str, target_code: str, *, max_length: int = 128
) -> list[str]:
    translator = NllbTranslator(ct2_dir)
    translations = translator.translate(
        sources,
        source_code,
        target_code,
        beam_size=BEAM_SIZE,
        max_batch_size=BATCH_SIZE,
        max_length=max_length,
    )
    return [t.text for t in translations]


def _knows(tokenizer: object, code: str) -> bool:
    try:
        tokenizer.check_language(code)  # type: ignore[attr-defined]
    except ValueError:
        return False
    return True


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    import sacrebleu

    refs = [list(references)]
    return Scores(
        chrf=sacrebleu.corpus_chrf(list(hypotheses), refs).score,
        bleu=sacrebleu.corpus_bleu(list(hypotheses), refs).score,
    )


def evaluate(ct2_dir: Path, pairs: Sequence[tuple[str, str]], source_code: str, target_code: str) -> Scores:
    hypotheses = translate_all(ct2_dir, [s for s, _ in pairs], source_code, target_code)
    return score(hypotheses, [t for _, t in pairs])
