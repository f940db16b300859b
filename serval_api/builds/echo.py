"""The launcher the API service uses: echo builds run as short tasks of this process, every other
build goes to the job launcher (`local` or `clearml`).

An echo build is a build like any other to the rest of the service: it has a job reference
(`echo:{instance}`), `cancel` and `wait_stopped` reach it, and a build an earlier run of this
replica left unfinished is run again by start-up recovery (`recovery.py`), as a local job is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from serval_api.db.models import EngineType
from serval_api.service.launcher import ECHO_REF, JobLauncher
from serval_common.jobs import JobSpec

log = logging.getLogger(__name__)

EchoRun = Callable[[JobSpec], Coroutine[Any, Any, None]]


class EchoLauncher(JobLauncher):
    """`run_echo` runs one echo build to its end (`serval_api.service.echo_builds.run`); it is set
    once the services it needs exist. `jobs` launches the rest."""

    def __init__(self, jobs: JobLauncher, instance_name: str) -> None:
        self.jobs = jobs
        self.job_ref = f"{ECHO_REF}:{instance_name}"
        self.run_echo: EchoRun | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def launch(self, spec: JobSpec) -> str:
        if not EngineType(spec.engine_type).is_echo:
            return await self.jobs.launch(spec)
        if self.run_echo is None:
            raise RuntimeError("echo builds cannot run before the API service has started")
        task = asyncio.create_task(self.run_echo(spec), name=f"echo-build-{spec.build_id}")
        self._tasks[spec.build_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(spec.build_id, None))
        return self.job_ref

    async def cancel(self, build_id: str) -> None:
        """An echo build notices a cancel at its next step; only jobs need stopping."""
        await self.jobs.cancel(build_id)

    async def wait_stopped(self, build_id: str, timeout_s: float) -> bool:
        task = self._tasks.get(build_id)
        if task is not None:
            done, _ = await asyncio.wait([task], timeout=timeout_s)
            return bool(done)
        return await self.jobs.wait_stopped(build_id, timeout_s)

    async def resume(self, build_id: str, job_ref: str) -> bool:
        """An echo build's task ended with the process that ran it: recovery runs it again."""
        if job_ref.split(":", 1)[0] == ECHO_REF:
            return False
        return await self.jobs.resume(build_id, job_ref)

    def queue_depth(self) -> int:
        return self.jobs.queue_depth()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.jobs.close()
