"""Build options of `smt-transfer` engines (Thot phrase-based SMT)."""

from __future__ import annotations

from serval_common.build_options import JobOptions


class SmtBuildOptions(JobOptions):
    """See docs/engine-families.md."""
