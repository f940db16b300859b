"""What the API service hands a build job: the one description both sides share."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from serval_common.store.base import ObjectMissing

if TYPE_CHECKING:
    from serval_common.store.base import ModelStore

CANCELED_EXIT_CODE = 143
"""128 + SIGTERM: how a build job that stopped because it was canceled exits."""

WORD_ALIGN_INPUT = "word-align.json"
"""A word-alignment build's export under `builds/{buildId}/`: a JSON array of the sentence pairs
to align, `{corpusId, textId, sourceRefs, targetRefs, source, target}`."""


@dataclass(frozen=True)
class JobSpec:
    """Everything a build job needs; it reaches the API service only through the platform RPCs."""

    build_id: str
    engine_id: str
    source_language: str
    target_language: str
    revision: int
    train: bool
    options_json: str
    store_url: str
    api_address: str
    job_token: str
    engine_type: str = "nmt"
    """The engine's family (`nmt`, `smt-transfer`, `statistical`): which job runs."""

    def command_args(self) -> list[str]:
        """Arguments of `python -m build_jobs run`."""
        return [
            "run",
            "--build-id", self.build_id,
            "--engine-id", self.engine_id,
            "--source-language", self.source_language,
            "--target-language", self.target_language,
            "--revision", str(self.revision),
            "--train" if self.train else "--no-train",
            "--options", self.options_json,
            "--store-url", self.store_url,
            "--api-address", self.api_address,
            "--engine-type", self.engine_type,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """Secrets travel in the environment, never on a command line that `ps` shows."""
        return {"SERVAL_JOB_TOKEN": self.job_token}


def job_token_folder(build_id: str) -> str:
    return f"builds/{build_id}/secrets"


def hand_over_job_token(store: ModelStore, build_id: str, token: str) -> None:
    """For a job on another machine (ClearML), where every way to hand it an environment variable
    shows it to whoever can see the task: the token waits in the model store, which the job reads
    anyway, until the job takes it (`take_job_token`)."""
    store.write_bytes(f"{job_token_folder(build_id)}/job-token", token.encode())


def take_job_token(store: ModelStore, build_id: str) -> str | None:
    """The token `hand_over_job_token` left, deleted as it is read: None once taken."""
    try:
        token = store.read_bytes(f"{job_token_folder(build_id)}/job-token").decode()
    except ObjectMissing:
        return None
    store.delete_prefix(job_token_folder(build_id))
    return token


PARENT_PID_ENV = "SERVAL_JOB_PARENT_PID"
"""Set by the local launcher: the API service process a job must not outlive."""

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """In a job the local launcher started: ask Linux to send SIGTERM (a cancel) when the API
    service dies, even by SIGKILL, so a restarted API service never finds a job it no longer
    follows still publishing; `recovery.recover_builds` restarts the build instead. Done in the
    job itself, after exec: a `preexec_fn` in the forking API service is unsafe beside gRPC's
    threads. Returns False when the API service is already gone."""
    expected = os.environ.get(PARENT_PID_ENV)
    if not expected:
        return True
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == int(expected)
