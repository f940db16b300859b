"""The baselines, measured in this process on the workload's model, verses and thread settings:

- direct: CTranslate2 `translate_batch` over every verse at once (the engine's limit);
- direct + confidences: the node's own backend over batches of `max_batch_size`, which adds the
  per-token scoring pass Serval's confidences need (no service around it);
- naive: one CTranslate2 call per request, one after another (how LibreTranslate and Argos serve);
- transformers: Hugging Face `generate` on the same checkpoint in batches of `max_batch_size`
  (how SIL's machine library and nllb-serve serve NLLB).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import ctranslate2

from bench.report import Measurement
from bench.workload import TARGET_CODE, Workload
from inference_gpu.families.nmt.backends.base import TranslateRequest
from inference_gpu.families.nmt.backends.ctranslate2 import CTranslate2Backend, resolve_device


def _backend(workload: Workload) -> CTranslate2Backend:
    """The node's backend, loaded as the node loads it (device, compute type, threads); the plain
    baselines call its CTranslate2 translator directly."""
    return CTranslate2Backend.load(workload.folder, workload.node, workload.max_positions)


def _request(workload: Workload, source: list[str]) -> TranslateRequest:
    return TranslateRequest(source, [TARGET_CODE], num_hypotheses=1, beam_size=workload.node.beam_size)


def _translate(translator: ctranslate2.Translator, workload: Workload, sources: list[list[str]]) -> int:
    """Target tokens (after the language prefix) of the best hypotheses."""
    results = translator.translate_batch(
        sources,
        target_prefix=[[TARGET_CODE]] * len(sources),
        beam_size=workload.node.beam_size,
        max_batch_size=workload.node.max_batch_size,
        max_decoding_length=workload.max_length,
    )
    return sum(len(result.hypotheses[0]) - 1 for result in results)


def direct(workload: Workload) -> Measurement:
    translator = _backend(workload).translator
    sources = workload.sources()
    _translate(translator, workload, sources[:1])
    started = time.perf_counter()
    tokens = _translate(translator, workload, sources)
    seconds = time.perf_counter() - started
    batches = math.ceil(len(sources) / workload.node.max_batch_size)
    return Measurement(
        workload.name, "direct (translate_batch, all verses)", len(sources), seconds, tokens,
        len(sources) / batches, baseline="direct",
    )  # fmt: skip


def direct_with_confidences(workload: Workload) -> Measurement:
    backend = _backend(workload)
    requests = [_request(workload, source) for source in workload.sources()]
    size = workload.node.max_batch_size
    backend.translate(requests[:1])
    started = time.perf_counter()
    tokens = 0
    for start in range(0, len(requests), size):
        tokens += sum(len(h[0].tokens) for h in backend.translate(requests[start : start + size]))
    seconds = time.perf_counter() - started
    backend.unload()
    return Measurement(
        workload.name, "direct + confidences (node backend)", len(requests), seconds, tokens,
        len(requests) / math.ceil(len(requests) / size), baseline="direct+conf",
    )  # fmt: skip


def naive(workload: Workload, count: int) -> Measurement:
    translator = _backend(workload).translator
    return _one_at_a_time(
        workload, "naive (one call per request)", count, lambda source: _translate(translator, workload, [source]), "naive"
    )  # fmt: skip


def naive_with_confidences(workload: Workload, count: int) -> Measurement:
    """The node's backend for one request at a time: the engine's share of a single request's
    latency on the full path."""
    backend = _backend(workload)

    def one(source: list[str]) -> int:
        return len(backend.translate([_request(workload, source)])[0][0].tokens)

    row = _one_at_a_time(workload, "naive + confidences (node backend)", count, one)
    backend.unload()
    return row


def _one_at_a_time(
    workload: Workload,
    scenario: str,
    count: int,
    call: Callable[[list[str]], int],
    baseline: str | None = None,
) -> Measurement:
    sources = workload.sources()[:count]
    call(sources[0])
    latencies: list[float] = []
    tokens = 0
    started = time.perf_counter()
    for source in sources:
        begun = time.perf_counter()
        tokens += call(source)
        latencies.append(time.perf_counter() - begun)
    seconds = time.perf_counter() - started
    return Measurement(
        workload.name, scenario, len(sources), seconds, tokens, 1.0, latencies, baseline=baseline
    )


def transformers_generate(workload: Workload, hf_folder: str, count: int) -> Measurement:
    """`generate` with the same beam, length limit and threads; fp16 on a GPU, fp32 on the CPU."""
    import torch
    from transformers import M2M100ForConditionalGeneration

    cuda = resolve_device(workload.node.device) == "cuda"
    torch.set_num_threads(workload.node.intra_threads)
    model = M2M100ForConditionalGeneration.from_pretrained(
        hf_folder, dtype=torch.float16 if cuda else torch.float32
    ).eval()
    if cuda:
        model = model.to("cuda")
    ids = {token: i for i, token in enumerate(workload.vocabulary())}
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    sources = [[ids.get(token, 3) for token in source] for source in workload.sources()[:count]]

    def generate(batch: list[list[int]]) -> int:
        width = max(len(row) for row in batch)
        input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in batch], device=model.device)
        with torch.inference_mode():
            output = model.generate(
                input_ids=input_ids,
                attention_mask=input_ids != pad,
                num_beams=workload.node.beam_size,
                max_new_tokens=workload.max_length,
                forced_bos_token_id=ids[TARGET_CODE],
            )
        # Each row: the decoder start, the language code, the tokens, then `</s>` and padding.
        return sum(sum(1 for t in row[2:].tolist() if t not in (pad, eos)) for row in output)

    generate(sources[:1])
    size = workload.node.max_batch_size
    latencies: list[float] = []
    tokens = 0
    started = time.perf_counter()
    for start in range(0, len(sources), size):
        batch = sources[start : start + size]
        begun = time.perf_counter()
        tokens += generate(batch)
        latencies.extend([time.perf_counter() - begun] * len(batch))
    seconds = time.perf_counter() - started
    precision = "fp16" if cuda else "fp32"
    return Measurement(
        workload.name, f"transformers generate ({precision})", len(sources), seconds, tokens,
        len(sources) / math.ceil(len(sources) / size), latencies, baseline="transformers",
    )  # fmt: skip
