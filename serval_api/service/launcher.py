"""The job launcher port: how the service layer hands a build to a build job. The service owns the
interface; `serval_api.builds` implements it (a local child process, a ClearML task, echo)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from serval_common.jobs import JobSpec

__all__ = [
    "ECHO_REF",
    "LOCAL_REF",
    "REPLICA_BOUND_REFS",
    "ExitHandler",
    "JobLauncher",
    "LaunchRefused",
    "QueueHandler",
    "StoreCall",
]

LOCAL_REF = "local"
"""The kind of job reference (`local:{api instance}`) of a build job run as this replica's child process."""
ECHO_REF = "echo"
"""The kind of job reference (`echo:{api instance}`) of an echo build run inside this replica."""
REPLICA_BOUND_REFS = frozenset({LOCAL_REF, ECHO_REF})
"""Job kinds that die with the API replica that runs them: only that replica recovers them."""

ExitHandler = Callable[[str, int, str], Awaitable[None]]
"""Called with (build_id, exit code, last lines of the job's log) when a job ends. Exit code 0 is
success, 143 a cancel; anything else faults a build the job itself did not finish."""

QueueHandler = Callable[[dict[str, int]], Awaitable[None]]
"""Called with {build_id: jobs ahead of it} for waiting builds whenever queue positions change."""

StoreCall = Callable[..., Awaitable[Any]]
"""Runs a blocking model-store call, `await store_call(fn, *args)`: the API service's own store
threads (`Services.store_call`); None: `asyncio.to_thread`."""


class LaunchRefused(Exception):
    """The launcher refused the job for a reason the client can act on (a queue its build options
    name does not exist): the message is the build's. Any other launch failure shows the client
    only an error id."""


class JobLauncher(ABC):
    on_exit: ExitHandler | None = None
    on_queue: QueueHandler | None = None
    store_call: StoreCall | None = None

    @abstractmethod
    async def launch(self, spec: JobSpec) -> str:
        """Queue or start the job and return at once with its job reference (`kind:id`), which the
        build records so a restarted API service can find the job again."""

    @abstractmethod
    async def cancel(self, build_id: str) -> None:
        """Stop the job if it is queued or running; a no-op for unknown builds."""

    async def wait_stopped(self, build_id: str, timeout_s: float) -> bool:
        """After `cancel`: wait up to `timeout_s` until the job can no longer write to the model
        store. Whether it stopped; a launcher that cannot tell (the job runs elsewhere) says True."""
        return True

    async def resume(self, build_id: str, job_ref: str) -> bool:
        """After an API restart: follow the job `job_ref` names again if it still runs. False means
        the job is gone and the build must be restarted or faulted."""
        return False

    @abstractmethod
    def queue_depth(self) -> int:
        """Jobs waiting for a free slot."""

    @abstractmethod
    async def close(self) -> None:
        """Stop following jobs (API service shutdown); local jobs are stopped."""
