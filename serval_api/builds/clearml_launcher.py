"""The ClearML job launcher (Serval's `ClearMLMonitorService`): each build job becomes a ClearML
task that a `clearml-agent` on a GPU machine runs in the build-job container image
(docs/clearml.md).

This module is the launcher's state machine: what a launch queues, which tasks it follows, and how
a followed task's ClearML status turns into a build's queue position or its end. Every call to the
ClearML server goes through `ClearMLClient` (`clearml_client.py`), the SDK adapter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from serval_api.builds.clearml_client import ClearMLClient, ClearMLError
from serval_api.service.launcher import JobLauncher
from serval_common.families import family
from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec, hand_over_job_token, job_token_folder
from serval_common.settings import ClearMLSettings, Settings
from serval_common.store import ModelStore, store_from_settings

T = TypeVar("T")

log = logging.getLogger(__name__)

JOB_REF_KIND = "clearml"

WAITING = frozenset({"queued"})
RUNNING = frozenset({"in_progress", "unknown"})
SUCCEEDED = frozenset({"completed", "published", "publishing", "closed"})
STOPPED = frozenset({"stopped"})
DEQUEUED = frozenset({"created"})
"""A followed task back in `created` (draft) was dequeued from ClearML: a cancel from outside."""

LOG_TAIL_LINES = 20
DOCKER_ARGS = "-e CLEARML_AGENT_SKIP_PYTHON_ENV_INSTALL=1"
"""`docker run` arguments: the image already holds the Python environment. No secret goes here:
whoever sees the task sees them; the job token waits in the model store (`hand_over_job_token`)."""


@dataclass
class _Followed:
    """A build whose task the monitor reads every poll interval."""

    build_id: str
    engine_id: str | None
    task_id: str
    status: str = "queued"
    reported_ahead: int | None = None

    @property
    def extra(self) -> dict[str, str | None]:
        return {"build_id": self.build_id, "engine_id": self.engine_id, "task_id": self.task_id}


class ClearMLJobLauncher(JobLauncher):
    def __init__(
        self,
        settings: Settings,
        *,
        task_api: Any = None,
        api_client_factory: Callable[[], Any] | None = None,
    ) -> None:
        """`task_api` and `api_client_factory` stand in for the SDK in tests; both go to the
        `ClearMLClient` every call to the ClearML server goes through."""
        self.settings = settings
        self.config: ClearMLSettings = settings.jobs.clearml
        self._client = ClearMLClient(self.config, task_api=task_api, api_client_factory=api_client_factory)
        self._followed: dict[str, _Followed] = {}
        self._monitor_task: asyncio.Task[None] | None = None
        self._store: ModelStore | None = None

    def queue_depth(self) -> int:
        return sum(1 for f in self._followed.values() if f.status in WAITING)

    async def launch(self, spec: JobSpec) -> str:
        extra = {"build_id": spec.build_id, "engine_id": spec.engine_id}
        queue = (
            family(spec.engine_type).options.parse(spec.options_json).clearml_queue
            or self.config.default_queue
        )
        queue_id = await self._client.queue_id(queue)
        spec = self._job_spec(spec)
        await self._store_call(hand_over_job_token, self.store(), spec.build_id, spec.job_token)
        try:
            task = await self._client.create_task(self.create_kwargs(spec))
        except Exception:
            await self._drop_token(spec.build_id)
            raise
        task_id = str(task.id)
        try:
            await self._client.enqueue(task, queue_id, queue)
        except Exception as exc:
            await self._discard(task, str(exc), {**extra, "task_id": task_id})
            await self._drop_token(spec.build_id)
            raise ClearMLError(f"could not enqueue the ClearML task on queue {queue!r}: {exc}") from exc
        self._follow(_Followed(spec.build_id, spec.engine_id, task_id))
        log.info("build job queued on ClearML", extra={**extra, "task_id": task_id, "queue": queue})
        return f"{JOB_REF_KIND}:{task_id}"

    def store(self) -> ModelStore:
        """The model store the API service gives its jobs (`JobSpec.store_url` is its URL)."""
        if self._store is None:
            self._store = store_from_settings(self.settings)
        return self._store

    async def _store_call(self, fn: Callable[..., T], *args: Any) -> T:
        """On the API service's store threads (`store_call`) once it has given them."""
        result: T = await (self.store_call or asyncio.to_thread)(fn, *args)
        return result

    async def _drop_token(self, build_id: str) -> None:
        """A job that never ran, or has ended, leaves no token waiting in the store."""
        try:
            await self._store_call(self.store().delete_prefix, job_token_folder(build_id))
        except Exception:
            log.warning(
                "could not delete the job token's store object", extra={"build_id": build_id}, exc_info=True
            )

    async def cancel(self, build_id: str) -> None:
        followed = self._followed.pop(build_id, None)
        if followed is None:
            return
        await self._drop_token(build_id)
        try:
            await self._client.connect()
            if followed.status in WAITING and await self._dequeue(followed):
                return
            await self._client.stop(followed.task_id, "canceled in Serval")
            log.info("ClearML task stopped", extra=followed.extra)
        except Exception:
            log.exception("could not stop the ClearML task", extra=followed.extra)

    async def resume(self, build_id: str, job_ref: str) -> bool:
        """Follow the task again unless ClearML says it is gone or finished. When ClearML cannot be
        reached the task is followed anyway: restarting the build could run two jobs at once, and
        the monitor settles the question once the server answers."""
        kind, _, task_id = job_ref.partition(":")
        if kind != JOB_REF_KIND or not task_id:
            return False
        followed = _Followed(build_id, None, task_id, status="unknown")
        try:
            row = await self._client.task_row(task_id)
        except Exception as exc:
            log.warning(
                "ClearML unreachable; following the task anyway", extra={**followed.extra, "error": str(exc)}
            )
            self._follow(followed)
            return True
        status = str(getattr(row, "status", "") or "")
        if row is None or not (status in WAITING or status in RUNNING):
            log.info(
                "the ClearML task is gone or finished", extra={**followed.extra, "status": status or None}
            )
            return False
        followed.status = status
        self._follow(followed)
        return True

    async def close(self) -> None:
        """Stop following; the tasks keep running on their agents and `resume` finds them again."""
        monitor, self._monitor_task = self._monitor_task, None
        if monitor is not None:
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
        self._followed.clear()

    # --- what the task runs -------------------------------------------------------------------

    def create_kwargs(self, spec: JobSpec) -> dict[str, Any]:
        """`Task.create` arguments: `python3 -m build_jobs run …` in the job image, no repository
        and no package install; the agent splits the module string like a shell would."""
        return {
            "project_name": self.config.project,
            "task_name": f"serval build {spec.build_id} (engine {spec.engine_id})",
            "task_type": "training" if spec.train else "inference",
            "module": shlex.join(["build_jobs", *spec.command_args()]),
            "binary": "python3",
            "docker": self.config.image,
            "docker_args": DOCKER_ARGS,
            "add_task_init_call": False,
            "detect_repository": False,
        }

    def _job_spec(self, spec: JobSpec) -> JobSpec:
        """Jobs run on other machines: they dial `job_api_address` when it is set."""
        if self.config.job_api_address:
            return dataclasses.replace(spec, api_address=self.config.job_api_address)
        host = spec.api_address.rsplit(":", 1)[0].strip("[]")
        if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
            log.warning(
                "build jobs on ClearML agents will dial a loopback API address; set jobs.clearml.job_api_address",
                extra={
                    "build_id": spec.build_id,
                    "engine_id": spec.engine_id,
                    "api_address": spec.api_address,
                },
            )
        return spec

    # --- following tasks ----------------------------------------------------------------------

    async def poll_once(self) -> None:
        """One monitor pass: report ended tasks to `on_exit` and moved queue positions to
        `on_queue`. The monitor loop calls it every `poll_interval_s`."""
        if not self._followed:
            return
        followed = list(self._followed.values())
        rows = await self._client.task_rows([f.task_id for f in followed])
        waiting: dict[str, list[_Followed]] = {}
        positions: dict[str, int] = {}
        for f in followed:
            row = rows.get(f.task_id)
            if row is None:
                await self._ended(f, 1, f"the ClearML task {f.task_id} no longer exists")
                continue
            f.status = str(getattr(row, "status", "") or "unknown")
            if f.status in WAITING:
                queue_id = getattr(getattr(row, "execution", None), "queue", None)
                if queue_id:
                    waiting.setdefault(str(queue_id), []).append(f)
            elif f.status in RUNNING:
                if f.reported_ahead != 0:
                    positions[f.build_id] = f.reported_ahead = 0
            else:
                code, tail = await self._outcome(f, row)
                await self._ended(f, code, tail)
        for queue_id, members in waiting.items():
            positions.update(await self._positions(queue_id, members))
        if positions and self.on_queue is not None:
            try:
                await self.on_queue(positions)
            except Exception:
                log.exception("could not record build queue positions")

    async def _outcome(self, f: _Followed, row: Any) -> tuple[int, str]:
        reason = "; ".join(
            str(x) for x in (getattr(row, "status_reason", None), getattr(row, "status_message", None)) if x
        )
        detail = f": {reason}" if reason else ""
        if f.status in SUCCEEDED:
            return 0, f"the ClearML task {f.task_id} completed{detail}"
        if f.status in STOPPED:
            return CANCELED_EXIT_CODE, f"the ClearML task {f.task_id} was stopped{detail}"
        if f.status in DEQUEUED:
            return CANCELED_EXIT_CODE, f"the ClearML task {f.task_id} was dequeued{detail}"
        try:
            lines = await self._client.last_log_lines(f.task_id, LOG_TAIL_LINES)
        except Exception:
            lines = []
        return 1, "\n".join([f"the ClearML task {f.task_id} {f.status}{detail}", *lines])

    async def _positions(self, queue_id: str, members: list[_Followed]) -> dict[str, int]:
        try:
            order = await self._client.queue_order(queue_id)
        except Exception as exc:
            log.warning("could not read a ClearML queue", extra={"queue_id": queue_id, "error": str(exc)})
            return {}
        moved: dict[str, int] = {}
        for f in members:
            if f.task_id in order and order.index(f.task_id) != f.reported_ahead:
                moved[f.build_id] = f.reported_ahead = order.index(f.task_id)
        return moved

    async def _ended(self, f: _Followed, code: int, tail: str) -> None:
        if self._followed.get(f.build_id) is not f:
            return  # canceled while this pass ran
        del self._followed[f.build_id]
        log.info("ClearML task ended", extra={**f.extra, "status": f.status, "exit_code": code})
        await self._drop_token(f.build_id)
        if self.on_exit is None:
            return
        try:
            await self.on_exit(f.build_id, code, tail)
        except Exception:
            log.exception("could not record the end of a build job", extra=f.extra)

    def _follow(self, followed: _Followed) -> None:
        self._followed[followed.build_id] = followed
        if self._monitor_task is None or self._monitor_task.done():
            self._monitor_task = asyncio.create_task(self._monitor())

    async def _monitor(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(self.config.poll_interval_s)
            try:
                await self.poll_once()
                if failures:
                    log.info("ClearML answers again", extra={"failed_polls": failures})
                failures = 0
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    log.warning(
                        "could not read ClearML task states",
                        extra={"error": str(exc), "failed_polls": failures},
                    )

    # --- best-effort SDK calls -----------------------------------------------------------------

    async def _dequeue(self, followed: _Followed) -> bool:
        try:
            await self._client.dequeue(followed.task_id)
        except Exception as exc:
            log.info(
                "could not dequeue the ClearML task; stopping it", extra={**followed.extra, "error": str(exc)}
            )
            return False
        log.info("ClearML task dequeued", extra=followed.extra)
        return True

    async def _discard(self, task: Any, why: str, extra: dict[str, str]) -> None:
        """Best effort: mark a task that could not be enqueued failed, so nobody runs it by hand."""
        try:
            await self._client.mark_failed(task, "not enqueued by Serval", why)
        except Exception as exc:
            log.warning("could not mark the unqueued ClearML task failed", extra={**extra, "error": str(exc)})
