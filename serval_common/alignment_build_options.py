"""Build options of `statistical` word-alignment engines."""

from __future__ import annotations

from pydantic import Field

from serval_common.build_options import JobOptions
from serval_common.thot_alignment import DEFAULT_HEURISTIC, DEFAULT_MODEL_TYPE, Heuristic, ModelType


class AlignmentBuildOptions(JobOptions):
    """See docs/engine-families.md. The default aligner (symmetrized HMM) was chosen by
    `bench/alignment.py`."""

    model_type: ModelType = Field(
        default=DEFAULT_MODEL_TYPE,
        alias="modelType",
        description="Thot word-alignment model: hmm (IBM1 then HMM), eflomal (Bayesian, slower, "
        "cleaner links), fast_align, ibm1 or ibm2",
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
        description="EM iterations of each model stage (hmm, fast_align, ibm1, ibm2); Thot's "
        "defaults when absent; eflomal keeps its own schedule",
    )
    max_segments: int | None = Field(
        default=None,
        alias="maxSegments",
        ge=1,
        description="train on at most this many sentence pairs (every pair is still aligned)",
    )
    lowercase: bool = Field(default=True, description="align lowercased words")
