"""What the API service hands a build job: the one description both sides share."""

from __future__ import annotations

from dataclasses import dataclass

CANCELED_EXIT_CODE = 143
"""128 + SIGTERM: how a build job that stopped because it was canceled exits."""


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
