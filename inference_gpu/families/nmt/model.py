"""The `nmt` family: an NLLB model converted to CTranslate2, its tokenizer and its micro-batcher.

A revision trained on fuzzy-match input (`Manifest.input_format`, docs/learning.md) is served with
its translation memory: each source is read together with the target of its best match there,
and every pair trained on the engine joins the memory at once (`train_segment`), so a verse a
translator confirms changes the next translation of a similar verse. Such a model learns segments:
the node replays the engine's pairs into it when it loads, like an smt-transfer model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inference_gpu.batcher import MicroBatcher
from inference_gpu.families.base import BadInput, Capability, InputTooLong, ServedModel
from inference_gpu.families.nmt.backends import Backend, Hypothesis, TranslateRequest, backend_class
from inference_gpu.families.nmt.results import build_result
from inference_gpu.families.nmt.word_graph import build_word_graph
from inference_gpu.metrics import NodeMetrics
from serval_common.core import UNKNOWN_SENDER, Detail, Sender, TranslationResult, WordGraph
from serval_common.fuzzy_memory import FUZZY_MATCH_INPUT, MEMORY_FILE, TranslationMemory
from serval_common.manifest import Manifest
from serval_common.nllb_tokenizer import EncodedSource, NllbInputError, NllbTokenizer
from serval_common.settings import NodeSettings


@dataclass
class NmtModel(ServedModel):
    family = "nmt"
    capabilities = frozenset(
        {Capability.TRANSLATE, Capability.N_BEST, Capability.PREFIX, Capability.WORD_GRAPH}
    )

    manifest: Manifest
    folder: Path
    backend: Backend
    tokenizer: NllbTokenizer
    batcher: MicroBatcher[TranslateRequest, list[Hypothesis]]
    settings: NodeSettings
    memory: TranslationMemory | None = None
    """The revision's translation memory when it reads fuzzy matches; None for plain input."""
    learned_through: int = 0
    """The number of the last trained pair added to `memory`."""

    @classmethod
    def load(
        cls,
        folder: Path,
        manifest: Manifest,
        node_settings: NodeSettings,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> NmtModel:
        """Load the backend and tokenizer."""
        tokenizer = NllbTokenizer.from_folder(folder)
        backend = backend_class(manifest.backend).load(folder, node_settings, manifest.max_positions)
        batcher: MicroBatcher[TranslateRequest, list[Hypothesis]] = MicroBatcher(
            backend.translate,
            max_batch_size=node_settings.max_batch_size,
            max_wait_ms=node_settings.max_batch_wait_ms,
            concurrency=backend.max_concurrent_batches,
            weights=node_settings.batch_weights,
            latency_target_ms=node_settings.batch_latency_target_ms or None,
            on_batch=on_batch,
            name=f"batch-{folder.name}",
        )
        memory = (
            TranslationMemory.read(folder / MEMORY_FILE)
            if manifest.input_format == FUZZY_MATCH_INPUT
            else None
        )
        return cls(manifest, folder, backend, tokenizer, batcher, node_settings, memory)

    @property
    def learns_segments(self) -> bool:
        return self.memory is not None

    async def train_segment(self, source: str, target: str, sentence_start: bool, seq: int) -> None:
        """Add a confirmed pair to the memory: the next similar source reads it."""
        if self.memory is None:
            raise self._unsupported(Capability.TRAIN_SEGMENT)
        if seq and seq <= self.learned_through:
            return
        self.memory.add(source, target)
        self.learned_through = max(self.learned_through, seq)

    @property
    def size_bytes(self) -> int:
        return self.backend.size_bytes

    @property
    def pending(self) -> int:
        return self.batcher.pending

    def observe_with(self, metrics: NodeMetrics) -> None:
        self.batcher.on_result = metrics.observe_batch

    def prepare(
        self,
        segment: str,
        n: int,
        source_code: str,
        target_code: str,
        prefix: str = "",
        engine_id: str = "",
        detail: Detail = Detail.FULL,
        sender: Sender = UNKNOWN_SENDER,
    ) -> tuple[EncodedSource, TranslateRequest]:
        """Tokenize and check one segment. n > 1 asks for the whole beam so that n distinct
        translations remain after merging hypotheses that differ only in their pieces. A
        non-blank `prefix` (target text the user typed) is forced as the start of every
        hypothesis."""
        if n < 1:
            raise BadInput("n must be at least 1")
        if not segment.strip():
            raise BadInput("the segment is empty")
        try:
            self.tokenizer.check_language(target_code)
            source = self.tokenizer.encode(segment, source_code)
        except NllbInputError as exc:
            raise BadInput(str(exc)) from exc
        if len(source.tokens) > self.settings.max_input_tokens:
            raise InputTooLong(
                f"the segment has {len(source.tokens)} tokens; at most {self.settings.max_input_tokens} are accepted"
            )
        if self.memory is not None:
            match = self.memory.best(segment)
            if match is not None:
                limit = self.manifest.max_positions or self.settings.max_input_tokens
                source = source.with_match(self.tokenizer.encode_target(match.target), target_code, limit)
        beam_size = max(self.settings.beam_size, n)
        request = TranslateRequest(
            source=source.tokens,
            target_prefix=[target_code, *self.tokenizer.encode_target(prefix)]
            if prefix.strip()
            else [target_code],
            num_hypotheses=1 if n == 1 else beam_size,
            beam_size=beam_size,
            engine=engine_id,
            detail=detail,
            sender=sender,
        )
        return source, request

    async def hypotheses(
        self,
        segment: str,
        n: int,
        source_code: str,
        target_code: str,
        prefix: str = "",
        engine_id: str = "",
        detail: Detail = Detail.FULL,
        sender: Sender = UNKNOWN_SENDER,
    ) -> tuple[EncodedSource, list[Hypothesis]]:
        """The backend's hypotheses for a segment, best first."""
        source, request = self.prepare(
            segment, n, source_code, target_code, prefix, engine_id, detail, sender
        )
        return source, await self.batcher.submit(request)

    async def translate(
        self,
        segment: str,
        n: int,
        source_code: str,
        target_code: str,
        prefix: str = "",
        *,
        engine_id: str = "",
        detail: Detail = Detail.FULL,
        sender: Sender = UNKNOWN_SENDER,
    ) -> list[TranslationResult]:
        """Up to n distinct translations, best first; with a `prefix`, each one starts with it."""
        source, hypotheses = await self.hypotheses(
            segment, n, source_code, target_code, prefix, engine_id, detail, sender
        )
        results: list[TranslationResult] = []
        seen: set[tuple[str, ...]] = set()
        for hypothesis in hypotheses:
            target = self.tokenizer.decode(hypothesis.tokens)
            if tuple(target.tokens) in seen:
                continue
            seen.add(tuple(target.tokens))
            results.append(build_result(source, target, hypothesis, detail))
            if len(results) == n:
                break
        return results

    async def word_graph(
        self,
        segment: str,
        source_code: str,
        target_code: str,
        *,
        engine_id: str = "",
        sender: Sender = UNKNOWN_SENDER,
    ) -> WordGraph:
        """The lattice of the whole beam's hypotheses (see `inference_gpu.families.nmt.word_graph`)."""
        source, hypotheses = await self.hypotheses(
            segment, self.settings.beam_size, source_code, target_code, engine_id=engine_id, sender=sender
        )
        return build_word_graph(source, [(self.tokenizer.decode(h.tokens), h) for h in hypotheses])

    async def close(self, *, drain: bool = True) -> None:
        """Stop taking requests, answer (or fail) the queued ones, then free the model in a worker
        thread: freeing a large model's memory takes a while, and the node's event loop keeps
        answering every other model meanwhile."""
        await self.batcher.close(drain=drain)
        await asyncio.to_thread(self.backend.unload)
