"""The local job launcher: each build job runs as a child process of the API service, at most
`jobs.max_concurrent` at once, the rest waiting in a first-come queue.

A job's environment is made for it (`job_environment`), never the API service's own: the
service's database URL, JWT and download secrets, ClearML keys and node token stay out of it."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from serval_api.service.launcher import LOCAL_REF, JobLauncher
from serval_common.jobs import PARENT_PID_ENV, JobSpec
from serval_common.settings import Settings

log = logging.getLogger(__name__)


class LocalJobLauncher(JobLauncher):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log_dir = (settings.home / "logs").resolve()
        self.job_ref = f"{LOCAL_REF}:{settings.api_instance_name}"
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
                env=job_environment(self.settings, spec),
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


_PASSED_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TMP", "TEMP", "TZ", "LANG", "LANGUAGE",
        "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "XDG_CACHE_HOME",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
        "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
        "CLEARML_OFFLINE_MODE",
    }
)  # fmt: skip
_PASSED_PREFIXES = (
    "LC_",
    "AWS_",
    "HF_",
    "TRANSFORMERS_",
    "CT2_",
    "TORCH_",
    "NVIDIA_",
    "COVERAGE_",
    "COV_CORE_",
)
"""What the job's libraries read: the locale, boto3's S3 credentials and endpoint settings,
Hugging Face and CTranslate2 caches and threads, coverage in tests."""


def job_environment(
    settings: Settings, spec: JobSpec, parent: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a build job needs and nothing more: PATH, HOME, temp folders, locale, TLS trust,
    proxies and thread settings from `parent` (this process's environment), the model store's S3
    settings, the job settings it reads (the deployment's training defaults among them), its job
    token and this process's id. The store URL and the API address travel as arguments."""
    source = os.environ if parent is None else parent
    environment = {
        name: value
        for name, value in source.items()
        if name in _PASSED_NAMES or name.startswith(_PASSED_PREFIXES)
    }
    store, jobs = settings.store, settings.jobs
    own = {
        "SERVAL_LOG_FORMAT": settings.log_format,
        "SERVAL_LOG_LEVEL": settings.log_level,
        "SERVAL_STORE__S3_ENDPOINT_URL": store.s3_endpoint_url,
        "SERVAL_STORE__S3_REGION": store.s3_region,
        "SERVAL_STORE__S3_ACCESS_KEY_ID": store.s3_access_key_id,
        "SERVAL_STORE__S3_SECRET_ACCESS_KEY": store.s3_secret_access_key,
        "SERVAL_STORE__S3_CONNECT_TIMEOUT_S": str(store.s3_connect_timeout_s),
        "SERVAL_STORE__S3_READ_TIMEOUT_S": str(store.s3_read_timeout_s),
        "SERVAL_STORE__S3_MAX_ATTEMPTS": str(store.s3_max_attempts),
        "SERVAL_JOBS__DEFAULT_BASE_MODEL": jobs.default_base_model,
        "SERVAL_JOBS__REPORT_RETRY_S": str(jobs.report_retry_s),
        PARENT_PID_ENV: str(os.getpid()),
    }
    environment.update({name: value for name, value in own.items() if value})
    environment.update(jobs.training_environment())
    environment.update(_tls_environment(settings))
    environment.update(spec.environment())
    return environment


def _tls_environment(settings: Settings) -> dict[str, str]:
    """With TLS on, a job dialing this API service trusts `jobs.tls_ca_file`, else the
    service's own certificate (enough when it is self-signed)."""
    jobs, api = settings.jobs, settings.api
    ca_file = jobs.tls_ca_file or api.tls_cert_file
    if not api.tls_cert_file or not ca_file:
        return {}
    environment = {"SERVAL_JOBS__TLS_CA_FILE": str(Path(ca_file).resolve())}
    if jobs.tls_server_name:
        environment["SERVAL_JOBS__TLS_SERVER_NAME"] = jobs.tls_server_name
    return environment
