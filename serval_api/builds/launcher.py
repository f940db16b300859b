"""The job launcher interface: how the API service hands a build to a build job."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


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
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """Secrets travel in the environment, never on a command line that `ps` shows."""
        return {"SERVAL_JOB_TOKEN": self.job_token}


class JobLauncher(ABC):
    @abstractmethod
    async def launch(self, spec: JobSpec) -> None:
        """Queue or start the job; return at once."""

    @abstractmethod
    async def cancel(self, build_id: str) -> None:
        """Stop the job if it is queued or running; a no-op for unknown builds."""

    @abstractmethod
    def queue_depth(self) -> int:
        """Jobs waiting for a free slot."""

    @abstractmethod
    async def close(self) -> None:
        """Stop every job this launcher started (API service shutdown)."""
