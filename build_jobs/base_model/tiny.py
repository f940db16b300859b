"""A tiny NLLB-architecture model trained from scratch on one language pair: a base model that exists
offline, for tests and demos. About a million parameters at the defaults; it needs roughly 1000 steps
at a constant learning rate before its output resembles the target language."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from build_jobs.base_model.convert import without_progress_bars
from build_jobs.base_model.tokenizer import SENTENCEPIECE_MODEL, make_nllb_tokenizer, save_nllb_tokenizer
from build_jobs.cpu_threads import torch_threads
from serval_common.languages import NLLB_LANGUAGE_CODE_SET

if TYPE_CHECKING:
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

Progress = Callable[[int, int, float], None]
"""Called after each training step with (step, steps, loss); step counts from 1."""

MAX_TOKENS = 128
MAX_POSITIONS = 256
BOS_ID = 0
PAD_ID = 1
EOS_ID = 2
IGNORED_LABEL = -100

TRAINING_DEFAULTS = {"learning_rate": 1e-3}
"""The tiny model's own training defaults, which its base model manifest carries (the checkpoint
folder's `serval-training-defaults.json`, read by `publish_base_model`): a model this small needs
a rate ten times a real NLLB-200's to learn within a demo's few hundred steps."""


@dataclass(frozen=True)
class Example:
    source_ids: list[int]
    label_ids: list[int]


def make_tiny_model(
    out_dir: Path,
    source_lines: Sequence[str],
    target_lines: Sequence[str],
    source_code: str,
    target_code: str,
    *,
    steps: int = 1000,
    d_model: int = 128,
    layers: int = 2,
    heads: int = 4,
    ffn: int = 512,
    vocab_size: int = 1000,
    lr: float = 1e-3,
    batch_size: int = 16,
    seed: int = 0,
    progress: Progress | None = None,
) -> Path:
    """Train a model on the parallel lines and write it as a Hugging Face folder (model, config,
    tokenizer files and `sentencepiece.bpe.model`) into `out_dir`, which it returns."""
    import torch
    from transformers import M2M100ForConditionalGeneration

    pairs = _parallel_pairs(source_lines, target_lines)
    for code in (source_code, target_code):
        if code not in NLLB_LANGUAGE_CODE_SET:
            raise ValueError(f"{code!r} is not an NLLB-200 language code")

    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = make_nllb_tokenizer([line for pair in pairs for line in pair], out_dir, vocab_size=vocab_size)
    examples = encode_pairs(tokenizer, pairs, source_code, target_code)

    with torch_threads():
        torch.manual_seed(seed)
        model = M2M100ForConditionalGeneration(
            nllb_config(len(tokenizer), d_model=d_model, layers=layers, heads=heads, ffn=ffn)
        )
        _train(model, examples, steps=steps, lr=lr, batch_size=batch_size, seed=seed, progress=progress)
        with without_progress_bars():
            model.save_pretrained(str(out_dir))
    save_nllb_tokenizer(tokenizer, out_dir / SENTENCEPIECE_MODEL, out_dir)
    write_training_defaults(out_dir)
    return out_dir


def write_training_defaults(hf_dir: Path) -> None:
    """Put `TRAINING_DEFAULTS` into the checkpoint folder, where `publish_base_model` finds them."""
    from build_jobs.publish import TRAINING_DEFAULTS_FILE
    from serval_common.build_options import TrainingDefaults

    defaults = TrainingDefaults.model_validate(TRAINING_DEFAULTS)
    (hf_dir / TRAINING_DEFAULTS_FILE).write_text(
        defaults.model_dump_json(exclude_none=True), encoding="utf-8"
    )


def _parallel_pairs(source_lines: Sequence[str], target_lines: Sequence[str]) -> list[tuple[str, str]]:
    if len(source_lines) != len(target_lines):
        raise ValueError(f"{len(source_lines)} source lines but {len(target_lines)} target lines")
    pairs = [(s.strip(), t.strip()) for s, t in zip(source_lines, target_lines, strict=True)]
    pairs = [(s, t) for s, t in pairs if s and t]
    if not pairs:
        raise ValueError("no parallel pair has text on both sides")
    return pairs


def nllb_config(
    vocab_size: int, *, d_model: int, layers: int, heads: int, ffn: int, max_positions: int = MAX_POSITIONS
) -> M2M100Config:
    """An NLLB-200 (M2M100) configuration: the same number of encoder and decoder layers, NLLB's
    special-token ids, tied embeddings and scaled embeddings, as every NLLB-200 checkpoint has."""
    from transformers import M2M100Config

    return M2M100Config(
        vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_position_embeddings=max_positions,
        activation_function="relu",
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        scale_embedding=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=EOS_ID,
    )


def encode_pairs(
    tokenizer: NllbTokenizer,
    pairs: Sequence[tuple[str, str]],
    source_code: str,
    target_code: str,
    max_length: int = MAX_TOKENS,
    matches: Sequence[str | None] | None = None,
) -> list[Example]:
    """NLLB layout: source `[src_code] pieces </s>`, labels `[tgt_code] pieces </s>`, each side cut
    to `max_length`. With `matches` (for each pair the target of its fuzzy match, None for none), a
    pair with a match gives a second, augmented example with the same labels (`augmented_source`)."""
    vocabulary = tokenizer.get_vocab()
    source_id, target_id = vocabulary[source_code], vocabulary[target_code]
    sources = _ids(tokenizer, [s for s, _ in pairs])
    targets = _ids(tokenizer, [t for _, t in pairs])
    # A pair without a match has no ids to add: `augmented_source` gives it no second example.
    match_ids = _ids(tokenizer, [m or "" for m in matches]) if matches is not None else [[]] * len(pairs)
    body = max_length - 2
    examples = []
    for s, t, m in zip(sources, targets, match_ids, strict=True):
        labels = [target_id, *t[:body], EOS_ID]
        examples.append(Example([source_id, *s[:body], EOS_ID], labels))
        augmented = augmented_source(source_id, s, target_id, m, max_length)
        if augmented is not None:
            examples.append(Example(augmented, labels))
    return examples


def augmented_source(
    source_code_id: int, source_ids: list[int], target_code_id: int, match_ids: list[int], max_length: int
) -> list[int] | None:
    """`[src_code, *source, tgt_code, *match, </s>]`, the match cut so the whole fits `max_length`;
    None when not even one of its ids fits. The node's layout and rule exactly
    (`serval_common.nllb_tokenizer.EncodedSource.with_match`): a model reads at serving what it trained on."""
    room = max_length - len(source_ids) - 3
    if room < 1 or not match_ids:
        return None
    return [source_code_id, *source_ids, target_code_id, *match_ids[:room], EOS_ID]


def _ids(tokenizer: NllbTokenizer, texts: list[str]) -> list[list[int]]:
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _train(
    model: M2M100ForConditionalGeneration,
    examples: list[Example],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    progress: Progress | None,
) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    batches = _batches(examples, batch_size, generator)
    model.train()
    for step in range(1, steps + 1):
        source, attention_mask, decoder_input, labels = _collate(next(batches))
        loss = model(
            input_ids=source, attention_mask=attention_mask, decoder_input_ids=decoder_input, labels=labels
        ).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if progress is not None:
            progress(step, steps, loss.item())
    model.eval()


def _batches(examples: list[Example], batch_size: int, generator: torch.Generator) -> Iterator[list[Example]]:
    """Endless batches, each epoch in a new random order."""
    import torch

    while True:
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            yield [examples[i] for i in order[start : start + batch_size]]


def _collate(batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher forcing: the decoder reads `</s> [tgt_code] pieces`, the labels shifted right."""
    import torch

    source = _pad([e.source_ids for e in batch], PAD_ID)
    decoder_input = _pad([[EOS_ID, *e.label_ids[:-1]] for e in batch], PAD_ID)
    labels = _pad([e.label_ids for e in batch], IGNORED_LABEL)
    return (
        torch.tensor(source),
        torch.tensor(source) != PAD_ID,
        torch.tensor(decoder_input),
        torch.tensor(labels),
    )


def _pad(rows: list[list[int]], value: int) -> list[list[int]]:
    width = max(len(row) for row in rows)
    return [row + [value] * (width - len(row)) for row in rows]
