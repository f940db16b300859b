"""How many CPU threads a build job's models compute on: one owner for the fine-tune (PyTorch), the
pretranslation and the evaluation (CTranslate2). Builds of full-size NLLB run on a GPU, where this
does not apply; on a CPU the models are small (tests, demos) and the cores shared.

One thread. The tiny model trains ~1.3x faster with a second thread on idle cores but 4-5x slower
with two when other processes share the cores, and CTranslate2 decodes it ~30x slower on two threads
than on one even on an idle 2-core VM (8 verses, beam 4: 3.1 s against 0.11 s): each operation is
smaller than the cost of waking the other threads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

CPU_THREADS = 1


@contextmanager
def torch_threads(count: int = CPU_THREADS) -> Iterator[None]:
    """PyTorch on `count` threads for the block, as it was after."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
