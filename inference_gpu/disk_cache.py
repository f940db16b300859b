"""The node's disk cache of model files: one folder per set of weights, kept within a budget.

`fetch_folder` (`serval_common.manifest`) writes each verified copy to
`{cache_dir}/{store prefix}/{digest of its file list}`; a copy's folder modification time is its
last use (loaded or unloaded), and `trim_cache` deletes the least recently used copies that no
loaded or loading model uses until the cache fits `node.cache_budget_bytes`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def touch(folder: Path) -> None:
    """Mark a cached copy used now: its folder's modification time orders the cache's eviction."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(folder)


_COPY_NAME = re.compile(r"[0-9a-f]{16}")
"""A cached copy's folder: `{cache_dir}/{store prefix}/{digest of its file list}` (`fetch_folder`)."""


class CacheEntry:
    __slots__ = ("path", "size", "used")

    def __init__(self, path: Path, size: int, used: float) -> None:
        self.path, self.size, self.used = path, size, used


def cache_entries(cache_dir: Path) -> list[CacheEntry]:
    entries: list[CacheEntry] = []
    for folder, subfolders, _ in os.walk(cache_dir):
        copies = [name for name in subfolders if _COPY_NAME.fullmatch(name)]
        for name in copies:
            path = Path(folder) / name
            with contextlib.suppress(FileNotFoundError):
                entries.append(CacheEntry(path, folder_size(path), path.stat().st_mtime))
        subfolders[:] = [name for name in subfolders if name not in copies and not name.startswith(".")]
    return sorted(entries, key=lambda entry: entry.used)


def trim_cache(cache_dir: Path, budget: int, in_use: set[Path]) -> tuple[list[tuple[Path, int]], int]:
    """Blocking: delete the least recently used copies not `in_use` until at most `budget` bytes are
    cached. The copies deleted with their sizes, and the bytes left."""
    entries = cache_entries(cache_dir)
    total = sum(entry.size for entry in entries)
    evicted: list[tuple[Path, int]] = []
    for entry in entries:
        if total <= budget:
            break
        if entry.path in in_use:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        total -= entry.size
        evicted.append((entry.path, entry.size))
        _remove_empty_parents(entry.path.parent, cache_dir)
    return evicted, total


def _remove_empty_parents(folder: Path, cache_dir: Path) -> None:
    while folder != cache_dir and folder.is_relative_to(cache_dir):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
