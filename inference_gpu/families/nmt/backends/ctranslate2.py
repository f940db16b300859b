"""The CTranslate2 backend.

CTranslate2 4.8's `translate_batch` gives no per-token log-probabilities (`return_log_prob`
exists only for `Generator`), so each batch's hypotheses are rescored with one `score_batch`
call: a single teacher-forced pass whose values match the decoder's. CTranslate2's hypothesis
score is `(sum(log_probs) + eos_log_prob) / steps ** length_penalty`, where `steps` counts the
target prefix, the tokens and `</s>` (no `</s>` term when decoding hit the length limit); the
prefix's own log-probability is not part of it.

The scoring pass runs over sub-batches of `SCORE_BATCH` hypotheses, which CTranslate2 sorts by
length first. One pass over a whole batch computes log-softmax over the vocabulary for every
position at once (32 verses × 41 positions × 256k entries is 1.3 GB for NLLB-600M), and the
sub-batches halve the scoring time (`bench/`: 11.4 s → 6.0 s for 32 verses of the 600M shape,
0.91 s → 0.55 s for 512 verses of the tiny model, on one thread).
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

import ctranslate2
import numpy as np

from inference_gpu.families.nmt.backends.base import Backend, Hypothesis, TranslateRequest
from serval_common.core import Detail
from serval_common.settings import NodeSettings

SCORE_BATCH = 8
_NO_ATTENTION = np.zeros((0, 0), dtype=np.float32)

_COMPUTE_TYPES = {
    "cuda": ("int8_float16", "int8_bfloat16", "float16", "int8", "float32"),
    "cpu": ("int8", "int8_float32", "float32"),
}


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    return "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"


def resolve_compute_type(compute_type: str, device: str, device_index: int = 0) -> str:
    """`auto`: int8_float16 on CUDA, int8 on the CPU, or the next best the device supports."""
    if compute_type != "auto":
        return compute_type
    supported = ctranslate2.get_supported_compute_types(device, device_index)
    preferred = _COMPUTE_TYPES.get(device, ("float32",))
    return next((kind for kind in preferred if kind in supported), "default")


class CTranslate2Backend(Backend):
    name = "ctranslate2"

    def __init__(
        self,
        translator: ctranslate2.Translator,
        folder: Path,
        settings: NodeSettings,
        compute_type: str,
        max_positions: int | None = None,
    ) -> None:
        self._translator: ctranslate2.Translator | None = translator
        self._max_positions = max_positions
        self._folder = folder
        self._settings = settings
        self._compute_type = compute_type
        self._size_bytes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

    @classmethod
    def load(cls, folder: Path, settings: NodeSettings, max_positions: int | None = None) -> Self:
        device = resolve_device(settings.device)
        compute_type = resolve_compute_type(settings.compute_type, device, settings.device_index)
        translator = ctranslate2.Translator(
            str(folder),
            device=device,
            device_index=settings.device_index,
            compute_type=compute_type,
            intra_threads=settings.intra_threads,
            inter_threads=settings.inter_threads,
        )
        return cls(translator, folder, settings, compute_type, max_positions)

    @property
    def translator(self) -> ctranslate2.Translator:
        if self._translator is None:
            raise RuntimeError(f"the model in {self._folder} is unloaded")
        return self._translator

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def device(self) -> str:
        return str(self.translator.device)

    @property
    def compute_type(self) -> str:
        return self._compute_type

    @property
    def max_concurrent_batches(self) -> int:
        return max(1, self._settings.inter_threads)

    def translate(self, requests: list[TranslateRequest]) -> list[list[Hypothesis]]:
        if not requests:
            return []
        num_hypotheses, beam_size = requests[0].key
        if any(request.key != requests[0].key for request in requests):
            raise ValueError("one batch mixes decoding settings")
        translator = self.translator
        max_length = self._settings.max_decoding_length + max(len(r.target_prefix) for r in requests)
        input_limit = 0
        if self._max_positions:
            # The decoder's first position holds the start token; inputs past the limit are cut.
            max_length = min(max_length, self._max_positions - 1)
            input_limit = self._max_positions
        full = [request.detail is Detail.FULL for request in requests]
        results = translator.translate_batch(
            [request.source for request in requests],
            target_prefix=[request.target_prefix for request in requests],
            beam_size=beam_size,
            num_hypotheses=num_hypotheses,
            return_scores=True,
            return_attention=any(full),
            max_input_length=input_limit,
            max_decoding_length=max_length,
        )
        # The scoring pass only for the requests whose callers read confidences.
        flat = [(i, tokens) for i, result in enumerate(results) if full[i] for tokens in result.hypotheses]
        scored = (
            translator.score_batch(
                [requests[i].source for i, _ in flat],
                [tokens for _, tokens in flat],
                max_batch_size=SCORE_BATCH,
                max_input_length=input_limit,
            )
            if flat
            else []
        )
        log_probs = iter(score.log_probs for score in scored)
        return [
            [
                to_hypothesis(
                    request.target_prefix,
                    tokens,
                    score,
                    next(log_probs),
                    attention,
                    finished=len(tokens) < max_length,
                )
                if wanted
                else text_hypothesis(request.target_prefix, tokens, score)
                for tokens, score, attention in zip(
                    result.hypotheses,
                    result.scores,
                    result.attention or [[]] * len(result.hypotheses),
                    strict=True,
                )
            ]
            for request, result, wanted in zip(requests, results, full, strict=True)
        ]

    def unload(self) -> None:
        translator, self._translator = self._translator, None
        if translator is not None and translator.model_is_loaded:
            translator.unload_model()


def text_hypothesis(prefix: list[str], tokens: list[str], score: float) -> Hypothesis:
    """A hypothesis whose caller reads its words only: no log-probabilities, no attention."""
    skip = 1 if prefix and tokens[:1] == prefix[:1] else 0
    return Hypothesis(
        tokens=list(tokens[skip:]),
        score=float(score),
        log_probs=[],
        eos_log_prob=None,
        attention=_NO_ATTENTION,
    )


def to_hypothesis(
    prefix: list[str],
    tokens: list[str],
    score: float,
    log_probs: list[float],
    attention: list[list[float]],
    *,
    finished: bool = True,
) -> Hypothesis:
    """A CTranslate2 hypothesis (which starts with the target prefix), its attention, and the
    `score_batch` log-probabilities of its tokens followed by `</s>`. Only the prefix's language
    code is stripped: the pieces of a typed prefix stay, so the result reads as a whole sentence.
    `finished` is False when decoding stopped at the length limit rather than on `</s>`."""
    skip = 1 if prefix and tokens[:1] == prefix[:1] else 0
    end = len(tokens)
    return Hypothesis(
        tokens=list(tokens[skip:]),
        score=float(score),
        log_probs=[float(value) for value in log_probs[skip:end]],
        eos_log_prob=float(log_probs[end]) if finished and len(log_probs) > end else None,
        attention=np.asarray(attention, dtype=np.float32)[skip:end],
    )
