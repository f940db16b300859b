"""`--pin`: the node on a core of its own, the API service and the load generator on the other,
each baseline on one core, so the full path is compared with the engine on equal terms.

Linux only (`os.sched_setaffinity`). Affinity is per thread, and a new thread inherits its creator's,
so pinning every thread a process has now pins whatever it starts later too."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

NODE_CORE = 0
SERVICE_CORE = 1


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of process `pid` to `cores`."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cores)


def available() -> bool:
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


@contextlib.contextmanager
def this_process_on(cores: set[int] | None) -> Iterator[None]:
    """Pin this process (the baselines, the load generator) for a block; no-op for None."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    pin(os.getpid(), cores)
    try:
        yield
    finally:
        pin(os.getpid(), before)
