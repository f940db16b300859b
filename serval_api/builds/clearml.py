"""The ClearML job launcher: each build job becomes a ClearML task that a `clearml-agent` on a GPU
machine runs in the build-job container image (docs/clearml.md).

The SDK blocks, so every call runs in a worker thread under a timeout; a server that does not
answer fails the call, never the event loop. The SDK's `Task` class and the signed-in API client
are constructor parameters, so tests can stand in for the server at exactly the SDK boundary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

from serval_api.builds.launcher import JobLauncher, JobSpec, LaunchRefused
from serval_common.families import family
from serval_common.jobs import CANCELED_EXIT_CODE, hand_over_job_token, job_token_folder
from serval_common.settings import ClearMLSettings, Settings
from serval_common.store import ModelStore, store_from_settings

log = logging.getLogger(__name__)

T = TypeVar("T")

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
_ROW_FIELDS = ["id", "status", "status_reason", "status_message", "execution.queue"]
_IDS_PER_REQUEST = 100

MISSING_CREDENTIALS = (
    "ClearML credentials are missing: set jobs.clearml.access_key and jobs.clearml.secret_key "
    "(SERVAL_JOBS__CLEARML__ACCESS_KEY / SERVAL_JOBS__CLEARML__SECRET_KEY), or CLEARML_API_ACCESS_KEY "
    "and CLEARML_API_SECRET_KEY, or run `clearml-init` to write a clearml.conf"
)


class ClearMLError(RuntimeError):
    """ClearML could not do what a launch needed; the message says what to check."""


class QueueMissing(ClearMLError, LaunchRefused):
    """The queue a build names does not exist: the client can name another."""


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
        """`task_api` is the SDK's `Task` class; `api_client_factory` signs in and returns an
        `APIClient` (blocking: it runs in a thread). Both default to the real SDK."""
        self.settings = settings
        self.config: ClearMLSettings = settings.jobs.clearml
        self._task_api = task_api if task_api is not None else _sdk_task_class()
        self._api_client_factory = api_client_factory or (lambda: sign_in(self.config))
        self._api: Any = None
        self._connect_lock = asyncio.Lock()
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
        queue_id = await self._queue_id(queue)
        spec = self._job_spec(spec)
        await asyncio.to_thread(hand_over_job_token, self.store(), spec.build_id, spec.job_token)
        try:
            task = await self._call(
                lambda: self._task_api.create(**self.create_kwargs(spec)), "creating the task"
            )
        except Exception:
            await self._drop_token(spec.build_id)
            raise
        task_id = str(task.id)
        try:
            await self._call(
                lambda: self._task_api.enqueue(task, queue_id=queue_id), f"enqueuing on {queue!r}"
            )
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

    async def _drop_token(self, build_id: str) -> None:
        """A job that never ran, or has ended, leaves no token waiting in the store."""
        try:
            await asyncio.to_thread(self.store().delete_prefix, job_token_folder(build_id))
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
            await self._connect()
            if followed.status in WAITING and await self._dequeue(followed):
                return
            task = await self._call(
                lambda: self._task_api.get_task(task_id=followed.task_id), "finding the task"
            )
            await self._call(
                lambda: task.mark_stopped(force=True, status_message="canceled in Serval"),
                "stopping the task",
            )
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
            await self._connect()
            rows = await self._call(lambda: task_rows(self._api, [task_id]), "reading the task")
        except Exception as exc:
            log.warning(
                "ClearML unreachable; following the task anyway", extra={**followed.extra, "error": str(exc)}
            )
            self._follow(followed)
            return True
        row = rows.get(task_id)
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
        await self._connect()
        followed = list(self._followed.values())
        rows = await self._call(
            lambda: task_rows(self._api, [f.task_id for f in followed]), "reading task states"
        )
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
            lines = await self._call(
                lambda: last_log_lines(self._api, f.task_id, LOG_TAIL_LINES), "reading the log"
            )
        except Exception:
            lines = []
        return 1, "\n".join([f"the ClearML task {f.task_id} {f.status}{detail}", *lines])

    async def _positions(self, queue_id: str, members: list[_Followed]) -> dict[str, int]:
        try:
            order = await self._call(lambda: queue_order(self._api, queue_id), "reading a queue")
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

    # --- SDK calls ----------------------------------------------------------------------------

    async def _queue_id(self, queue: str) -> str:
        """Sign in if need be and find the queue, both within `connect_timeout_s` and with no HTTP
        retries: every launch fails fast when the server is gone or the queue does not exist,
        before a task is created."""
        await self._connect()
        found = await self._call(
            lambda: find_queue_id(self._api, queue),
            f"looking up queue {queue!r}",
            self.config.connect_timeout_s,
        )
        if found is None:
            raise QueueMissing(
                f"the ClearML queue {queue!r} does not exist: create it in the ClearML web app (Workers & "
                "Queues), or name another with the build option `clearmlQueue` or jobs.clearml.default_queue"
            )
        return found

    async def _connect(self) -> None:
        """Sign in once, failing within `connect_timeout_s`; then point the SDK's `Task` at the
        same server and credentials."""
        async with self._connect_lock:
            if self._api is not None:
                return
            self._api = await self._call(
                self._api_client_factory, "signing in", self.config.connect_timeout_s
            )
            self._set_task_credentials()

    def _set_task_credentials(self) -> None:
        c = self.config
        given = {
            "api_host": c.api_host,
            "web_host": c.web_host,
            "files_host": c.files_host,
            "key": c.access_key,
            "secret": c.secret_key,
        }
        if any(given.values()):
            self._task_api.set_credentials(**{k: v for k, v in given.items() if v})

    async def _dequeue(self, followed: _Followed) -> bool:
        try:
            await self._call(lambda: self._task_api.dequeue(followed.task_id), "dequeuing the task")
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
            await self._call(
                lambda: task.mark_failed(
                    status_reason="not enqueued by Serval", status_message=why, force=True
                ),
                "marking the task failed",
            )
        except Exception as exc:
            log.warning("could not mark the unqueued ClearML task failed", extra={**extra, "error": str(exc)})

    async def _call(self, fn: Callable[[], T], what: str, timeout: float | None = None) -> T:
        limit = timeout if timeout is not None else self.config.request_timeout_s
        try:
            async with asyncio.timeout(limit):  # unlike 3.11's wait_for, never swallows a cancel
                return await asyncio.to_thread(fn)
        except TimeoutError:
            raise ClearMLError(
                f"the ClearML server at {describe_host(self.config)} did not answer within {limit:g}s "
                f"while {what}; check that it is up and reachable from the API service"
            ) from None


def task_rows(api: Any, task_ids: list[str]) -> dict[str, Any]:
    """The followed tasks' states (status, reason, message, queue) by task id."""
    rows: dict[str, Any] = {}
    for start in range(0, len(task_ids), _IDS_PER_REQUEST):
        chunk = task_ids[start : start + _IDS_PER_REQUEST]
        for row in api.tasks.get_all(id=chunk, only_fields=_ROW_FIELDS):
            rows[str(row.id)] = row
    return rows


def find_queue_id(api: Any, name: str) -> str | None:
    """The id of the queue named exactly `name` (the server matches names as regular expressions)."""
    for row in api.queues.get_all(name=f"^{re.escape(name)}$", only_fields=["id"]):
        return str(row.id)
    return None


def queue_order(api: Any, queue_id: str) -> list[str]:
    """The task ids waiting on a queue, next first."""
    queue = api.queues.get_by_id(queue=queue_id)
    entries: Iterable[Any] = getattr(queue, "entries", None) or []
    return [str(entry.task) for entry in entries]


def last_log_lines(api: Any, task_id: str, count: int) -> list[str]:
    """The last lines of the task's console log (one request; used only when a task failed)."""
    result = api.events.get_task_log(task=task_id, batch_size=count)
    events = sorted(getattr(result, "events", None) or [], key=lambda e: e.get("timestamp") or 0)
    lines = [line for event in events for line in str(event.get("msg") or "").splitlines()]
    return lines[-count:]


def describe_host(config: ClearMLSettings) -> str:
    return config.api_host or os.environ.get("CLEARML_API_HOST") or "the api_server of clearml.conf"


def sign_in(config: ClearMLSettings) -> Any:
    """Sign in to the ClearML API server with no HTTP retries, so a missing server or bad
    credentials fail at once with a message that says which setting to check."""
    from clearml.backend_api.session.client import APIClient, StrictSession
    from clearml.backend_api.session.defs import MissingConfigError
    from clearml.backend_api.session.session import LoginError

    if bool(config.access_key) != bool(config.secret_key):
        raise ClearMLError("set both jobs.clearml.access_key and jobs.clearml.secret_key, or neither")
    try:
        session = StrictSession(
            api_key=config.access_key,
            secret_key=config.secret_key,
            host=config.api_host,
            http_retries_config={"total": 0},
        )
    except MissingConfigError:
        raise ClearMLError(MISSING_CREDENTIALS) from None
    except LoginError as exc:
        raise ClearMLError(_login_failure(config, str(exc))) from None
    except Exception as exc:
        raise ClearMLError(
            f"could not sign in to the ClearML server at {describe_host(config)}: {exc}"
        ) from None
    return APIClient(session=session)


def _login_failure(config: ClearMLSettings, detail: str) -> str:
    host = describe_host(config)
    if "ConnectionError" in detail or "Connection refused" in detail or "Max retries" in detail:
        address = config.api_host or os.environ.get("CLEARML_API_HOST")
        scheme_missing = address is not None and urlparse(address).scheme not in ("http", "https")
        hint = " (the address needs http:// or https://)" if scheme_missing else ""
        return (
            f"cannot reach the ClearML API server at {host}{hint}: check jobs.clearml.api_host "
            f"(SERVAL_JOBS__CLEARML__API_HOST) or CLEARML_API_HOST, and that the server is up. {detail}"
        )
    return (
        f"the ClearML API server at {host} refused to sign in: check jobs.clearml.access_key and "
        f"jobs.clearml.secret_key (or CLEARML_API_ACCESS_KEY / CLEARML_API_SECRET_KEY). {detail}"
    )


def _sdk_task_class() -> Any:
    from clearml import Task

    return Task
