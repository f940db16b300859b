"""The ClearML SDK adapter (Serval's `ClearMLService`): every call the ClearML launcher makes to the
`clearml` package, and nothing about builds.

The SDK blocks, so every call runs in a worker thread under a timeout; a server that does not
answer fails the call, never the event loop. The SDK's `Task` class and the signed-in API client
are constructor parameters, so tests can stand in for the server at exactly the SDK boundary. It
stands apart from the launcher (`clearml_launcher.py`), which decides what to call and when.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlparse

from serval_api.service.launcher import LaunchRefused
from serval_common.settings import ClearMLSettings

T = TypeVar("T")

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


class ClearMLClient:
    """One ClearML server, signed in on first use: its tasks, queues and logs."""

    def __init__(
        self,
        config: ClearMLSettings,
        *,
        task_api: Any = None,
        api_client_factory: Callable[[], Any] | None = None,
    ) -> None:
        """`task_api` is the SDK's `Task` class; `api_client_factory` signs in and returns an
        `APIClient` (blocking: it runs in a thread). Both default to the real SDK."""
        self.config = config
        self._task_api = task_api if task_api is not None else _sdk_task_class()
        self._api_client_factory = api_client_factory or (lambda: sign_in(self.config))
        self._api: Any = None
        self._connect_lock = asyncio.Lock()

    async def connect(self) -> None:
        """Sign in once, failing within `connect_timeout_s`; then point the SDK's `Task` at the
        same server and credentials."""
        async with self._connect_lock:
            if self._api is not None:
                return
            self._api = await self._call(
                self._api_client_factory, "signing in", self.config.connect_timeout_s
            )
            self._set_task_credentials()

    async def queue_id(self, queue: str) -> str:
        """Sign in if need be and find the queue, both within `connect_timeout_s` and with no HTTP
        retries: every launch fails fast when the server is gone or the queue does not exist,
        before a task is created."""
        await self.connect()
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

    async def create_task(self, create_kwargs: dict[str, Any]) -> Any:
        return await self._call(lambda: self._task_api.create(**create_kwargs), "creating the task")

    async def enqueue(self, task: Any, queue_id: str, queue: str) -> None:
        await self._call(lambda: self._task_api.enqueue(task, queue_id=queue_id), f"enqueuing on {queue!r}")

    async def mark_failed(self, task: Any, reason: str, message: str) -> None:
        await self._call(
            lambda: task.mark_failed(status_reason=reason, status_message=message, force=True),
            "marking the task failed",
        )

    async def dequeue(self, task_id: str) -> None:
        await self._call(lambda: self._task_api.dequeue(task_id), "dequeuing the task")

    async def stop(self, task_id: str, message: str) -> None:
        """Find the task and mark it stopped, whatever it is doing."""
        task = await self._call(lambda: self._task_api.get_task(task_id=task_id), "finding the task")
        await self._call(lambda: task.mark_stopped(force=True, status_message=message), "stopping the task")

    async def task_row(self, task_id: str) -> Any | None:
        """One task's state (as `task_rows`), or None when the server knows no such task."""
        await self.connect()
        rows = await self._call(lambda: task_rows(self._api, [task_id]), "reading the task")
        return rows.get(task_id)

    async def task_rows(self, task_ids: list[str]) -> dict[str, Any]:
        await self.connect()
        return await self._call(lambda: task_rows(self._api, task_ids), "reading task states")

    async def queue_order(self, queue_id: str) -> list[str]:
        return await self._call(lambda: queue_order(self._api, queue_id), "reading a queue")

    async def last_log_lines(self, task_id: str, count: int) -> list[str]:
        return await self._call(lambda: last_log_lines(self._api, task_id, count), "reading the log")

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
