"""What a running build job tells the world: build status, phases and execution data to the API
service (the platform RPCs), and progress, scalars and user properties to its ClearML task when
it runs in one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from build_jobs.report import Phase, PlatformReporter, Stage

if TYPE_CHECKING:
    from build_jobs.clearml_task import ClearMLTask

log = logging.getLogger(__name__)


class Canceled(Exception):
    """The build was canceled; nothing is published."""


class BuildProgress:
    def __init__(
        self, platform: PlatformReporter, task: ClearMLTask | None, canceled: threading.Event
    ) -> None:
        self.platform = platform
        self.task = task
        self._canceled = canceled
        self._phases: list[Phase] = []

    def should_cancel(self) -> bool:
        """SIGTERM from the launcher, or the ClearML task stopped from its web app."""
        return self._canceled.is_set() or (self.task is not None and self.task.stopped())

    def check_cancel(self) -> None:
        """Raise `Canceled` when the build was asked to stop: every family's job calls this between
        steps and between uploaded files."""
        if self.should_cancel():
            raise Canceled("the build was canceled")

    def update(self, fraction: float, message: str) -> None:
        step = self._phases[-1].step if self._phases else 0
        self.platform.progress(step, fraction, message, phases=self._phases)
        if self.task is not None:
            train = self._phase("Train")
            self.task.progress(
                fraction,
                message,
                train_step=train.step if train else None,
                train_step_count=train.step_count if train else None,
            )

    def phase(self, stage: Stage, step: int, step_count: int) -> None:
        """Record progress within a phase; the phase starts on its first call."""
        current = self._phase(stage)
        if current is None:
            current = Phase(stage, started=datetime.now(UTC))
            self._phases.append(current)
        current.step, current.step_count = step, step_count

    def train_step(self, step: int, total: int, loss: float, lr: float) -> None:
        self.phase("Train", step, total)
        self.scalar("loss", "train", loss, step)
        self.scalar("learning rate", "train", lr, step)

    def scalar(self, title: str, series: str, value: float, iteration: int) -> None:
        if self.task is not None:
            self.task.scalar(title, series, value, iteration)

    def within(self, start: float, end: float, stage: Stage, what: str) -> Callable[[int, int], None]:
        """A (done, total) callback for one phase that maps onto [start, end] of the build."""

        def report(done: int, total: int) -> None:
            self.phase(stage, done, total)
            self.update(start + (end - start) * done / max(total, 1), f"{what}: {done}/{total}")

        return report

    def _phase(self, stage: Stage) -> Phase | None:
        return next((p for p in self._phases if p.stage == stage), None)
