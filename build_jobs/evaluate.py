"""Scoring a CTranslate2 model on held-out pairs: chrF and BLEU (sacrebleu), beam 2, batched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BEAM_SIZE = 2
BATCH_SIZE = 32


@dataclass(frozen=True)
class Scores:
    chrf: float
    bleu: float


def translate_all(
    ct2_dir: Path, sources: Sequence[str], source_code: str, target_code: str, *, max_length: int = 128
) -> list[str]:
    """Translate with the node's tokenizer, so scores reflect what the node serves. A code the
    model does not know reaches CTranslate2 as `<unk>` (the base model before codes are added)."""
    import ctranslate2

    from inference_gpu.nllb import NllbTokenizer

    tokenizer = NllbTokenizer.from_folder(ct2_dir)
    batch = [[source_code, *tokenizer.encode(s, source_code).pieces[: max_length - 2], "</s>"]
             if s.strip() and _knows(tokenizer, source_code)
             else [source_code, *tokenizer.encode_target(s)[: max_length - 2], "</s>"]
             for s in sources]  # fmt: skip
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    results = translator.translate_batch(
        batch,
        target_prefix=[[target_code]] * len(batch),
        beam_size=BEAM_SIZE,
        max_batch_size=BATCH_SIZE,
        max_decoding_length=max_length,
    )
    out = []
    for result in results:
        pieces = [p for p in result.hypotheses[0] if p not in (target_code, "</s>")]
        out.append(tokenizer.decode(pieces).translation)
    return out


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
