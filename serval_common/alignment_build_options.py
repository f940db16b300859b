"""Build options of `statistical` word-alignment engines."""

from __future__ import annotations

from pydantic import Field

from serval_common.build_options import JobOptions
from serval_common.thot_alignment import DEFAULT_HEURISTIC, DEFAULT_MODEL_TYPE, Heuristic, ModelType


class AlignmentBuildOptions(JobOptions):
    """See docs/engine-families.md.

    The default aligner, eflomal symmetrized with grow-diag-final-and, was chosen with
    `bench/alignment.py` on the bundled English→Swahili New Testament (7,844 verse pairs): against
    the HMM and fast_align its two directions agree twice as often (67% of links against 31% and
    44%), its links from names to their transliterations are the cleanest (95% precision against
    80% and 89%, recall 98% for all three) and it agrees most with both others. A whole build
    on the New Testament (train on every verse pair, align every one, stream, publish) takes
    148 s with it against 101 s (HMM) and 56 s (fast_align) on a shared 2-core machine, and a
    node aligns a verse in 5–11 ms (median; p95 13–28 ms). `modelType` "fast_align" trades quality for a
    faster build."""

    model_type: ModelType = Field(
        default=DEFAULT_MODEL_TYPE,
        alias="modelType",
        description="Thot word-alignment model: eflomal (Bayesian IBM1/HMM/fertility, the cleanest "
        "links), hmm (IBM1 then HMM), fast_align (the fastest to train), ibm1 or ibm2",
    )
    symmetrization_heuristic: Heuristic = Field(
        default=DEFAULT_HEURISTIC,
        alias="symmetrizationHeuristic",
        description="how the direct and inverse alignments are combined",
    )
    iterations: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="training iterations of each model stage (eflomal: of each of its IBM1, HMM "
        "and fertility stages); absent, Thot's defaults, which for eflomal grow as the corpus shrinks",
    )
    max_segments: int | None = Field(
        default=None,
        alias="maxSegments",
        ge=1,
        description="train on at most this many sentence pairs (every pair is still aligned)",
    )
    lowercase: bool = Field(default=True, description="align lowercased words")
