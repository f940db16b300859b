"""Fine-tuning an NLLB-architecture Hugging Face checkpoint on a parallel corpus (teacher forcing,
NLLB layout, constant-LR AdamW), with language codes the checkpoint lacks added as new tokens."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from build_jobs.base_model.convert import without_progress_bars
from build_jobs.base_model.tiny import _batches, _collate, encode_pairs
from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL, load_nllb_tokenizer, save_nllb_tokenizer
from build_jobs.cpu_threads import torch_threads
from build_jobs.progress import Canceled

if TYPE_CHECKING:
    import torch
    from transformers import M2M100ForConditionalGeneration, NllbTokenizer

Progress = Callable[[int, int, float, float], None]
"""(step, max_steps, loss, learning rate), every `PROGRESS_EVERY` steps and after the last one."""
ShouldCancel = Callable[[], bool]

PROGRESS_EVERY = 10


@dataclass(frozen=True)
class TrainingResult:
    steps: int
    last_loss: float
    seconds: float
    stopped_by_budget: bool
    added_language_codes: list[str]
    """every code added to the base tokenizer, earlier revisions' first"""
    device: str = "cpu"


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


def lr_factor(schedule: str, warmup_steps: int, max_steps: int) -> Callable[[int], float]:
    """The multiplier of the peak rate after `done` optimizer steps: a linear warm-up, then
    constant, or a linear or cosine decay that reaches zero at `max_steps`."""

    def factor(done: int) -> float:
        if done < warmup_steps:
            return (done + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        spent = min(1.0, (done - warmup_steps) / max(1, max_steps - warmup_steps))
        return 1.0 - spent if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * spent))

    return factor


def freeze_parts(model: M2M100ForConditionalGeneration, parts: Sequence[str]) -> list[torch.nn.Parameter]:
    """Stop gradients for the named parts and return the parameters still trained. The shared
    token embedding (encoder, decoder and output layer use one matrix) freezes only with
    `embeddings`, so new language codes still learn when the encoder or decoder is frozen."""
    shared = model.get_input_embeddings().weight
    modules = {"encoder": model.model.encoder, "decoder": model.model.decoder}
    for part in parts:
        if part == "embeddings":
            shared.requires_grad_(False)
            for module in modules.values():
                positions = getattr(module, "embed_positions", None)
                if positions is not None:
                    for parameter in positions.parameters():
                        parameter.requires_grad_(False)
        else:
            for parameter in modules[part].parameters():
                if parameter is not shared:
                    parameter.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("freeze leaves nothing to train; freeze fewer of embeddings, encoder, decoder")
    return trainable


def finetune(
    hf_dir: Path,
    out_dir: Path,
    pairs: Sequence[tuple[str, str]],
    source_code: str,
    target_code: str,
    *,
    matches: Sequence[str | None] | None = None,
    previously_added: Sequence[str] = (),
    max_steps: int,
    time_budget_s: float,
    lr: float,
    batch_size: int,
    gradient_accumulation: int = 1,
    max_length: int = 128,
    lr_schedule: str = "constant",
    warmup_steps: int = 0,
    freeze: Sequence[str] = (),
    seed: int = 0,
    progress: Progress | None = None,
    should_cancel: ShouldCancel | None = None,
) -> TrainingResult:
    """Fine-tune the checkpoint in `hf_dir` and save model, tokenizer and SentencePiece model into
    `out_dir`. Stops after `max_steps` or once `time_budget_s` is spent, whichever comes first.
    Trains on the first CUDA device when PyTorch sees one, else on the CPU. `matches`: for each
    pair the target of its best fuzzy match among the other pairs (None: none); each pair with one
    is also trained on as the source followed by that target (`encode_pairs`), as a revision that
    reads fuzzy matches is served."""
    import torch
    from transformers import M2M100ForConditionalGeneration

    started = time.monotonic()
    tokenizer = load_tokenizer(hf_dir, previously_added)
    new_codes = add_codes(tokenizer, [source_code, target_code])
    examples = encode_pairs(tokenizer, pairs, source_code, target_code, max_length, matches)
    with torch_threads(), without_progress_bars():
        torch.manual_seed(seed)
        model = M2M100ForConditionalGeneration.from_pretrained(str(hf_dir))
        if len(tokenizer) != model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
        generator = torch.Generator().manual_seed(seed)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)  # type: ignore[arg-type]  # transformers types `to` through a decorator
        trainable = freeze_parts(model, freeze)
        optimizer = torch.optim.AdamW(trainable, lr=lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_factor(lr_schedule, warmup_steps, max_steps)
        )
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
                source, attention_mask, decoder_input, labels = (
                    tensor.to(device) for tensor in _collate(next(batches))
                )
                loss = model(
                    input_ids=source,
                    attention_mask=attention_mask,
                    decoder_input_ids=decoder_input,
                    labels=labels,
                ).loss
                (loss / gradient_accumulation).backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            step_lr = float(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
            step += 1
            loss_value = total / gradient_accumulation
            if progress is not None and (step % PROGRESS_EVERY == 0 or step == max_steps):
                progress(step, max_steps, loss_value, step_lr)
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
        device=device.type,
    )
