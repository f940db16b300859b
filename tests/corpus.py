"""Where the verse-aligned New Testaments (`data/ebible-nt`) lie, for the tests and the benchmarks
alike. Only the standard library, so a benchmark can import it without the tests' fixtures."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DIR = "SERVAL_TEST_SHARED_DIR"
"""Where the shared folder (`data/ebible-nt`, the verse-aligned New Testaments) lies, when it is
not `../shared` beside the checkout."""


def _shared_corpus() -> Path:
    """`$SERVAL_TEST_SHARED_DIR/data/ebible-nt`; else `../shared` beside the checkout; else, for a
    clone of a checkout on this machine (`git clone /path/to/main x`, as a fresh-machine check
    makes), `../shared` beside the checkout it was cloned from. The first candidate that exists,
    or the second, which `verse_pairs` names in its error."""
    tail = Path("data") / "ebible-nt"
    candidates = [REPO.parent / "shared" / tail]
    if os.environ.get(SHARED_DIR):
        candidates.insert(0, Path(os.environ[SHARED_DIR]) / tail)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        origin = subprocess.run(
            ["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip()  # fmt: skip
        if origin and "://" not in origin and Path(origin).is_dir():
            candidates.append(Path(origin).resolve().parent / "shared" / tail)
    return next((path for path in candidates if path.is_dir()), REPO.parent / "shared" / tail)


EBIBLE = _shared_corpus()
