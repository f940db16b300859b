"""The job launcher interface: how the API service hands a build to a build job."""

from __future__ import annotations

from abc import ABC, abstractmethod

from serval_common.jobs import JobSpec

__all__ = ["JobLauncher", "JobSpec"]


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
