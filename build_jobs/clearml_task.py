"""A build job's side of ClearML: progress, scalars and stop requests of the task it runs in.

Serval's ClearML contract: `task.set_progress(percent)` and the user properties `message`,
`train_step` and `train_step_count`; cancellation is the task being stopped. Every method logs
and swallows SDK errors, because ClearML trouble must never fail a build.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROJECT = "serval"
PROGRESS_TITLE, PROGRESS_SERIES = "progress", "percent"
"""Progress is also a scalar, so it shows as a plot (and is kept by offline mode, which drops
`set_progress`)."""

_TRUE = ("1", "true", "yes", "on")


@dataclass
class _Progress:
    percent: int
    message: str
    train_step: int | None
    train_step_count: int | None


class ClearMLTask:
    def __init__(
        self,
        task: Any,
        *,
        offline: bool,
        progress_interval_s: float = 2.0,
        stop_check_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`task` is the SDK's Task. Progress with an unchanged message reaches the server at most
        every `progress_interval_s` (each update costs requests); the latest pending one is sent
        with the next update that is due, or on `close`."""
        self._task = task
        self.offline = offline
        self._progress_interval_s = progress_interval_s
        self._stop_check_interval_s = stop_check_interval_s
        self._clock = clock
        self._pending: _Progress | None = None
        self._last_progress_at: float | None = None
        self._last_message: str | None = None
        self._progress_reports = 0
        self._last_stop_check: float | None = None
        self._stopped = False

    @classmethod
    def attach(cls, task_name: str = "serval build job") -> ClearMLTask | None:
        """The task this job runs in: None unless a ClearML agent started the job (it sets
        CLEARML_TASK_ID) or offline mode is asked for (CLEARML_OFFLINE_MODE=1, which records into
        the SDK's cache folder). Frameworks and arguments are not captured; console output is."""
        remote = bool(os.environ.get("CLEARML_TASK_ID"))
        offline = not remote and os.environ.get("CLEARML_OFFLINE_MODE", "").strip().lower() in _TRUE
        if not (remote or offline):
            return None
        try:
            from clearml import Task

            if offline:
                Task.set_offline(True)
            task: Any = Task.init(
                project_name=PROJECT,
                task_name=task_name,
                reuse_last_task_id=False,
                auto_connect_arg_parser=False,
                auto_connect_frameworks=False,
                auto_resource_monitoring=remote,
                auto_connect_streams=True,
            )
        except Exception:
            log.exception("could not attach to the ClearML task; the build goes on without it")
            return None
        log.info("attached to the ClearML task", extra={"task_id": task.id, "offline": offline})
        return cls(task, offline=offline)

    @property
    def task_id(self) -> str:
        return str(self._task.id)

    def progress(
        self,
        fraction: float,
        message: str,
        train_step: int | None = None,
        train_step_count: int | None = None,
    ) -> None:
        percent = max(0, min(100, round(fraction * 100)))
        self._pending = _Progress(percent, message, train_step, train_step_count)
        now = self._clock()
        due = self._last_progress_at is None or now - self._last_progress_at >= self._progress_interval_s
        if due or percent >= 100 or message != self._last_message:
            self._flush_progress()

    def scalar(self, title: str, series: str, value: float, iteration: int) -> None:
        """A plotted value such as the training loss, the learning rate or chrF."""
        try:
            self._task.get_logger().report_scalar(title, series, float(value), int(iteration))
        except Exception:
            log.warning("could not report a scalar to ClearML", exc_info=True, extra={"title": title})

    def stopped(self) -> bool:
        """True once the task was stopped (or asked to stop) from ClearML: a cancel. The server
        is asked at most every `stop_check_interval_s`; offline it never is."""
        if self._stopped or self.offline:
            return self._stopped
        now = self._clock()
        if self._last_stop_check is not None and now - self._last_stop_check < self._stop_check_interval_s:
            return False
        self._last_stop_check = now
        try:
            status, message = self._task.get_status_message()
        except Exception:
            log.warning("could not read the ClearML task's status", exc_info=True)
            return False
        self._stopped = str(status) == "stopped" or (
            str(status) == "in_progress" and "stopping" in str(message)
        )
        if self._stopped:
            log.info("the ClearML task was stopped", extra={"task_id": self.task_id})
        return self._stopped

    def close(self) -> None:
        """Send the pending progress and flush the reports. The task's final status is left to
        the SDK's exit hook, which sets it from the exit code (`Task.close` would mark even a
        failed build completed)."""
        self._flush_progress()
        try:
            self._task.flush(wait_for_uploads=True)
        except Exception:
            log.warning("could not flush the ClearML reports", exc_info=True)

    def _flush_progress(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        self._last_progress_at = self._clock()
        self._last_message = pending.message
        self._progress_reports += 1
        properties: dict[str, str] = {"message": pending.message}
        if pending.train_step is not None:
            properties["train_step"] = str(pending.train_step)
        if pending.train_step_count is not None:
            properties["train_step_count"] = str(pending.train_step_count)
        try:
            self._task.set_progress(pending.percent)
            self._task.set_user_properties(**properties)
            self._task.get_logger().report_scalar(
                PROGRESS_TITLE, PROGRESS_SERIES, float(pending.percent), self._progress_reports
            )
        except Exception:
            log.warning("could not report progress to ClearML", exc_info=True)
