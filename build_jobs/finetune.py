"""Fine-tuning an NLLB-architecture Hugging Face checkpoint on a parallel corpus (teacher forcing,
NLLB layout, constant-LR AdamW), with language codes the checkpoint lacks added as new tokens."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from build_jobs.base_model.convert import without_progress_bars
from build_jobs.base_model.tiny import (
    TRAINING_THREADS,
    _batches,
    _collate,
    _torch_threads,
    encode_pairs,
)
from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL, load_nllb_tokenizer, save_nllb_tokenizer

if TYPE_CHECKING:
    from transformers import NllbTokenizer

Progress = Callable[[int, int, float], None]
"""(step, max_steps, loss), called every `PROGRESS_EVERY` steps and after the last one."""
ShouldCancel = Callable[[], bool]

PROGRESS_EVERY = 10


class Canceled(Exception):
    """The build was canceled while training; nothing is published."""


@dataclass(frozen=True)
class TrainingResult:
    steps: int
    last_loss: float
    seconds: float
    stopped_by_budget: bool
    added_language_codes: list[str]
    """every code added to the base tokenizer, earlier revisions' first"""


def load_tokenizer(hf_dir: Path, added_codes: Sequence[str]) -> NllbTokenizer:
    """The NLLB tokenizer of `hf_dir` with the codes earlier fine-tuning added, in their order."""
    tokenizer = load_nllb_tokenizer(hf_dir)
    add_codes(tokenizer, added_codes)
    return tokenizer


def add_codes(tokenizer: NllbTokenizer, codes: Sequence[str]) -> list[str]:
    """Add each code the tokenizer lacks as a special token; returns the ones added."""
    added = []
    for code in codes:
        if code not in tokenizer.get_vocab():
            tokenizer.add_tokens([code], special_tokens=True)
            added.append(code)
    return added


def finetune(
    hf_dir: Path,
    out_dir: Path,
    pairs: Sequence[tuple[str, str]],
    source_code: str,
    target_code: str,
    *,
    previously_added: Sequence[str] = (),
    max_steps: int,
    time_budget_s: float,
    lr: float,
    batch_size: int,
    gradient_accumulation: int = 1,
    max_length: int = 128,
    seed: int = 0,
    progress: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
) -> TrainingResult:
    """Fine-tune the checkpoint in `hf_dir` and save model, tokenizer and SentencePiece model into
    `out_dir`. Stops after `max_steps` or once `time_budget_s` is spent, whichever comes first."""
    import torch
    from transformers import M2M100ForConditionalGeneration

    started = time.monotonic()
    tokenizer = load_tokenizer(hf_dir, previously_added)
    new_codes = add_codes(tokenizer, [source_code, target_code])
    examples = encode_pairs(tokenizer, pairs, source_code, target_code, max_length)
    with _torch_threads(TRAINING_THREADS), without_progress_bars():
        torch.manual_seed(seed)
        model = M2M100ForConditionalGeneration.from_pretrained(str(hf_dir))
        if len(tokenizer) != model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        batches = _batches(examples, batch_size, generator)
        model.train()
        step, loss_value, stopped_by_budget = 0, float("nan"), False
        while step < max_steps:
            if should_cancel is not None and should_cancel():
                raise Canceled("the build was canceled")
            if time.monotonic() - started >= time_budget_s:
                stopped_by_budget = True
                break
            optimizer.zero_grad()
            total = 0.0
            for _ in range(gradient_accumulation):
                source, attention_mask, decoder_input, labels = _collate(next(batches))
                loss = model(
                    input_ids=source,
                    attention_mask=attention_mask,
                    decoder_input_ids=decoder_input,
                    labels=labels,
                ).loss
                (loss / gradient_accumulation).backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            loss_value = total / gradient_accumulation
            if progress is not None and (step % PROGRESS_EVERY == 0 or step == max_steps):
                progress(step, max_steps, loss_value)
        if should_cancel is not None and should_cancel():
            raise Canceled("the build was canceled")
        model.eval()
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(out_dir))
    save_nllb_tokenizer(tokenizer, hf_dir / SENTENCEPIECE_MODEL, out_dir)
    return TrainingResult(
        steps=step,
        last_loss=loss_value,
        seconds=time.monotonic() - started,
        stopped_by_budget=stopped_by_budget,
        added_language_codes=[*previously_added, *new_codes],
    )
