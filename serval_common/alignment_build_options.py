"""Build options of `statistical` word-alignment engines."""

from __future__ import annotations

from serval_common.build_options import JobOptions


class AlignmentBuildOptions(JobOptions):
    """See docs/engine-families.md."""
