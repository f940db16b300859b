"""Where the benchmarks read the verse-aligned New Testaments: `data/ebible-nt` under
`$SERVAL_SHARED_DIR`, else under `../shared` beside the checkout (as the tests find it)."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DIR = "SERVAL_SHARED_DIR"
EBIBLE = (
    Path(os.environ.get(SHARED_DIR) or Path(__file__).resolve().parents[2] / "shared") / "data" / "ebible-nt"
)
