"""The local job launcher: each build job runs as a child process of the API service, at most
`jobs.max_concurrent` at once, the rest waiting in a first-come queue."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from serval_api.builds.launcher import JobLauncher, JobSpec
from serval_common.jobs import PARENT_PID_ENV
from serval_common.settings import Settings

log = logging.getLogger(__name__)


class LocalJobLauncher(JobLauncher):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log_dir = (settings.home / "logs").resolve()
        self.job_ref = f"local:{settings.api_instance_name}"
        self._slots = asyncio.Semaphore(max(1, settings.jobs.max_concurrent))
        self._waiting: list[str] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._processes: dict[str, asyncio.subprocess.Process] = {}

    def queue_depth(self) -> int:
        return len(self._waiting)

    async def launch(self, spec: JobSpec) -> str:
        self._waiting.append(spec.build_id)
        self._tasks[spec.build_id] = asyncio.create_task(self._run(spec))
        await self._queue_changed()
        return self.job_ref

    async def cancel(self, build_id: str) -> None:
        if build_id in self._waiting:
            self._waiting.remove(build_id)
            await self._queue_changed()
        process = self._processes.get(build_id)
        if process is not None and process.returncode is None:
            process.terminate()
        elif (task := self._tasks.get(build_id)) is not None:
            task.cancel()

    async def wait_stopped(self, build_id: str, timeout_s: float) -> bool:
        task = self._tasks.get(build_id)
        if task is None:
            return True
        done, _ = await asyncio.wait([task], timeout=timeout_s)
        return bool(done)

    async def close(self) -> None:
        self._waiting.clear()
        for build_id in list(self._tasks):
            await self.cancel(build_id)
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def _tls_environment(self) -> dict[str, str]:
        """With TLS on, a job dialing this API service trusts `jobs.tls_ca_file`, else the
        service's own certificate (enough when it is self-signed)."""
        jobs, api = self.settings.jobs, self.settings.api
        ca_file = jobs.tls_ca_file or api.tls_cert_file
        if not api.tls_cert_file or not ca_file:
            return {}
        environment = {"SERVAL_JOBS__TLS_CA_FILE": str(Path(ca_file).resolve())}
        if jobs.tls_server_name:
            environment["SERVAL_JOBS__TLS_SERVER_NAME"] = jobs.tls_server_name
        return environment

    async def _queue_changed(self, started: str | None = None) -> None:
        if self.on_queue is None:
            return
        positions = {build_id: ahead for ahead, build_id in enumerate(self._waiting)}
        if started is not None:
            positions[started] = 0
        if positions:
            try:
                await self.on_queue(positions)
            except Exception:
                log.exception("could not record build queue positions")

    async def _run(self, spec: JobSpec) -> None:
        extra = {"build_id": spec.build_id, "engine_id": spec.engine_id}
        try:
            async with self._slots:
                if spec.build_id not in self._waiting:
                    return
                self._waiting.remove(spec.build_id)
                await self._queue_changed(started=spec.build_id)
                code, tail = await self._execute(spec)
            log.info("build job exited", extra={**extra, "exit_code": code})
            if self.on_exit is not None:
                await self.on_exit(spec.build_id, code, tail)
        finally:
            self._tasks.pop(spec.build_id, None)

    async def _execute(self, spec: JobSpec) -> tuple[int, str]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"build-{spec.build_id}.log"
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "build_jobs",
                *spec.command_args(),
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env={
                    **os.environ,
                    **spec.environment(),
                    **self._tls_environment(),
                    PARENT_PID_ENV: str(os.getpid()),
                },
            )
            self._processes[spec.build_id] = process
            log.info(
                "build job started",
                extra={"build_id": spec.build_id, "pid": process.pid, "log": str(log_path)},
            )
            try:
                code = await process.wait()
            except asyncio.CancelledError:
                process.kill()
                raise
            finally:
                self._processes.pop(spec.build_id, None)
        tail = log_path.read_text(errors="replace").splitlines()[-20:]
        return code, "\n".join(tail)
