"""The build-job template: what every engine family's build job shares, and what each supplies.

`build_jobs.job.run_build` is the template method (as machine.py's `TranslationEngineBuildJob`):
it reports the build started, asks the family's `FamilyBuildJob` to build (train or take the base
model, pretranslate or align, publish last), then reports execution data, progress and completion;
a cancel or a failure at any point is reported once, from there. A family supplies only `build`;
the cancel check, progress and reporting come from `BuildProgress` and the template. Which class
builds a family is the family registry's to say (`EngineFamily.job`, `serval_common.families`).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from build_jobs.progress import BuildProgress
from serval_common.families import EngineFamily
from serval_common.jobs import JobSpec
from serval_common.settings import Settings
from serval_common.store import ModelStore


@dataclass(frozen=True)
class Built:
    """What a family's build reports once its revision is published."""

    corpus_size: int
    confidence: float
    summary: str
    """the build's last message, after `published revision N`"""
    scores: dict[str, float] = field(default_factory=dict)
    pretranslated: int | None = None
    """Segments pretranslated; None: the family reports no translation execution data."""
    log_extra: dict[str, object] = field(default_factory=dict)


class FamilyBuildJob(ABC):
    """One family's build of one engine revision. Construct it before anything is reported (a bad
    build option faults the build before any work), then `build()`."""

    reports_quote_conventions: ClassVar[bool] = True
    """Whether the target texts' quotation-mark conventions are detected and reported first."""

    def __init__(self, args: JobSpec, settings: Settings, store: ModelStore, progress: BuildProgress) -> None:
        self.args = args
        self.settings = settings
        self.store = store
        self.progress = progress

    @abstractmethod
    def build(self) -> Built:
        """Train (or take the base model), pretranslate or align, publish the revision last; call
        `self.progress.check_cancel()` between steps."""


def job_class(family: EngineFamily) -> type[FamilyBuildJob]:
    """The build-job class the registry names for `family` (`module:Class`)."""
    if family.job is None:
        raise ValueError(f"{family.name} builds run inside the API service, not as a build job")
    module, _, name = family.job.partition(":")
    cls: type[FamilyBuildJob] = getattr(importlib.import_module(module), name)
    return cls
