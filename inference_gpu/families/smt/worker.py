"""The worker-process side of the `smt-transfer` family (`inference_gpu.families.smt.model`): each loaded
model's worker process holds one `SmtEngine`, loaded by `worker_load` and driven by `worker_call`
(the functions `SmtModel` submits to the process), and `resident_bytes` reads a process's resident
memory for the model manager's memory budget.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from inference_gpu.families.smt.engine import SmtEngine

_engine: SmtEngine | None = None


def worker_load(folder: str, max_input_tokens: int) -> tuple[int, int]:
    """In the worker: load the model; the worker's process id and resident memory in bytes."""
    global _engine
    _engine = SmtEngine(Path(folder), max_input_tokens)
    return os.getpid(), resident_bytes()


def worker_call(method: str, *args: Any) -> Any:
    if _engine is None:
        raise RuntimeError("the model's worker process holds no model")
    return getattr(_engine, method)(*args)


def resident_bytes(pid: int | str = "self") -> int:
    """A process's resident memory (Linux); 0 when it cannot be read (gone, another system)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0
