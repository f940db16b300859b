"""The `statistical` family: a Thot word-alignment model folder (`backend="thot-align"`, layout in
`serval_common.thot_alignment`) that aligns one sentence pair at a time.

Thot's models are not safe to share between threads, so calls run one at a time per model, each
in a worker thread (`asyncio.to_thread`) so the node's event loop and its other models keep going;
a verse pair takes a few milliseconds (bench/alignment.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

# Imported here, not lazily, so that a node without the `smt` extra fails to import this module
# and does not claim the family (`inference_gpu.families.available_families`).
import machine.translation.thot  # noqa: F401

from inference_gpu.families.base import BadInput, Capability, InputTooLong, ServedModel
from serval_common.core import AlignedWordPair, WordAlignmentResult
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings
from serval_common.thot_alignment import Aligned, ThotAligner, folder_size

MEMORY_PER_FILE_BYTE = 1.25
"""Memory per byte of the model's files: loading an HMM aligner of 2,000 verse pairs grew the
process by 11.5 MB for 11.3 MB of files; a quarter more leaves room for the other model types."""


class ModelClosed(RuntimeError):
    """The model is unloading and takes no more requests."""


class AlignmentModel(ServedModel):
    family = "statistical"
    capabilities = frozenset({Capability.ALIGN})

    def __init__(
        self, manifest: Manifest, folder: Path, aligner: ThotAligner, settings: NodeSettings
    ) -> None:
        self.manifest = manifest
        self.folder = folder
        self._aligner = aligner
        self._settings = settings
        self._size = int(MEMORY_PER_FILE_BYTE * folder_size(folder))
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = asyncio.Lock()
        self._closed = False
        self._dropping = False

    @classmethod
    def load(
        cls,
        folder: Path,
        manifest: Manifest,
        node_settings: NodeSettings,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> AlignmentModel:
        return cls(manifest, folder, ThotAligner.load(folder), node_settings)

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def pending(self) -> int:
        return self._pending

    async def align(self, source: str, target: str) -> WordAlignmentResult:
        """The pair's tokens (as written) and links, each scored with its translation probability."""
        if self._closed:
            raise ModelClosed("the model is unloading")
        if not source.strip() or not target.strip():
            raise BadInput("the source and target segments must both have text")
        self._pending += 1
        self._idle.clear()
        try:
            async with self._lock:
                if self._dropping:
                    raise ModelClosed("the model was unloaded before this request ran")
                aligned = await asyncio.to_thread(self._align, source, target)
        finally:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()
        return WordAlignmentResult(
            source_tokens=tuple(aligned.source_tokens),
            target_tokens=tuple(aligned.target_tokens),
            alignment=tuple(
                AlignedWordPair(link.source_index, link.target_index, link.score) for link in aligned.links
            ),
        )

    def _align(self, source: str, target: str) -> Aligned:
        longest = max(len(self._aligner.tokenizer.tokens(text)) for text in (source, target))
        if longest > self._settings.max_input_tokens:
            raise InputTooLong(
                f"a segment has {longest} tokens; at most {self._settings.max_input_tokens} are accepted"
            )
        return self._aligner.align(source, target)

    async def close(self, *, drain: bool = True) -> None:
        """Refuse new calls; with `drain`, let the queued ones finish; then free the model. Without
        it the queued ones fail with `ModelClosed` and only the one running finishes (a Thot call
        cannot be interrupted)."""
        self._closed = True
        self._dropping = not drain
        await self._idle.wait()
        await asyncio.to_thread(self._aligner.close)
