"""A local build job runs with an environment made for it: what it needs, none of the API
service's secrets. Read from a real job process's /proc/<pid>/environ."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from serval_api.builds.local import LocalJobLauncher
from serval_common.jobs import PARENT_PID_ENV, JobSpec
from serval_common.settings import Settings
from tests.helpers import free_port

DATABASE_PASSWORD = "db-password-4c1f"
JWT_SECRET = "jwt-secret-9d2e-long-enough-for-hs256"
DOWNLOAD_SECRET = "download-secret-77ab"
CLEARML_SECRET = "clearml-secret-key-e0e0"
NODE_TOKEN = "node-token-5150"
S3_ACCESS_KEY = "AKIAJOBTEST000000001"
S3_SECRET = "s3-secret-the-job-needs"
JOB_TOKEN = "job-token-3a3a"


def read_environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/<pid>/environ")
@pytest.mark.timeout(60)
def test_a_local_job_gets_what_it_needs_and_none_of_the_api_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_url = f"postgresql://serval:{DATABASE_PASSWORD}@db.internal:5432/serval"
    for name, value in {
        "SERVAL_DATABASE_URL": database_url,
        "SERVAL_AUTH__JWT_SECRET": JWT_SECRET,
        "SERVAL_API__DOWNLOAD_SECRET": DOWNLOAD_SECRET,
        "SERVAL_JOBS__CLEARML__SECRET_KEY": CLEARML_SECRET,
        "SERVAL_NODE__TOKEN": NODE_TOKEN,
        "SERVAL_API__ADMIN_KEY": "admin-key-from-the-environment",
        "UNRELATED_SECRET": "not-for-jobs",
        "AWS_DEFAULT_REGION": "eu-west-3",
        "OMP_NUM_THREADS": "3",
        "LC_ALL": "C.UTF-8",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings(
        home=tmp_path,
        store={
            "url": "s3://models/serval",
            "s3_endpoint_url": "http://127.0.0.1:1",
            "s3_access_key_id": S3_ACCESS_KEY,
            "s3_secret_access_key": S3_SECRET,
        },
        jobs={"report_retry_s": 30, "default_base_model": "tiny-nllb"},
    )
    assert settings.resolved_database_url == database_url and settings.auth.jwt_secret == JWT_SECRET
    spec = JobSpec(
        build_id="b1",
        engine_id="e1",
        source_language="eng_Latn",
        target_language="swh_Latn",
        revision=1,
        train=False,
        options_json="{}",
        store_url=settings.resolved_store_url,
        api_address=f"127.0.0.1:{free_port()}",
        job_token=JOB_TOKEN,
    )
    launcher = LocalJobLauncher(settings)

    async def run() -> dict[str, str]:
        await launcher.launch(spec)
        try:
            for _ in range(500):
                process = launcher._processes.get("b1")
                if process is not None:
                    return read_environ(process.pid)
                await asyncio.sleep(0.01)
            raise AssertionError("the job process never started")
        finally:
            await launcher.close()

    environment = asyncio.run(run())
    dump = "\n".join(f"{k}={v}" for k, v in environment.items())

    assert environment["SERVAL_JOB_TOKEN"] == JOB_TOKEN
    assert environment["SERVAL_STORE__S3_ACCESS_KEY_ID"] == S3_ACCESS_KEY
    assert environment["SERVAL_STORE__S3_SECRET_ACCESS_KEY"] == S3_SECRET
    assert environment["SERVAL_STORE__S3_ENDPOINT_URL"] == "http://127.0.0.1:1"
    assert environment["SERVAL_STORE__S3_READ_TIMEOUT_S"] == str(settings.store.s3_read_timeout_s)
    assert environment["SERVAL_STORE__S3_MAX_ATTEMPTS"] == str(settings.store.s3_max_attempts)
    assert environment["SERVAL_JOBS__REPORT_RETRY_S"] == "30.0"
    assert environment["SERVAL_JOBS__DEFAULT_BASE_MODEL"] == "tiny-nllb"
    assert environment[PARENT_PID_ENV].isdigit()
    for needed in ("PATH", "AWS_DEFAULT_REGION", "OMP_NUM_THREADS", "LC_ALL"):
        assert environment[needed] == os.environ[needed], needed

    for secret in (
        DATABASE_PASSWORD,
        JWT_SECRET,
        DOWNLOAD_SECRET,
        CLEARML_SECRET,
        NODE_TOKEN,
        "not-for-jobs",
    ):
        assert secret not in dump, secret
    assert "admin-key-from-the-environment" not in dump
    serval_names = {name for name in environment if name.startswith("SERVAL_")}
    assert serval_names <= {
        "SERVAL_JOB_TOKEN",
        "SERVAL_JOB_PARENT_PID",
        "SERVAL_LOG_FORMAT",
        "SERVAL_LOG_LEVEL",
        "SERVAL_STORE__S3_ENDPOINT_URL",
        "SERVAL_STORE__S3_REGION",
        "SERVAL_STORE__S3_ACCESS_KEY_ID",
        "SERVAL_STORE__S3_SECRET_ACCESS_KEY",
        "SERVAL_STORE__S3_CONNECT_TIMEOUT_S",
        "SERVAL_STORE__S3_READ_TIMEOUT_S",
        "SERVAL_STORE__S3_MAX_ATTEMPTS",
        "SERVAL_JOBS__DEFAULT_BASE_MODEL",
        "SERVAL_JOBS__REPORT_RETRY_S",
    }, serval_names
