"""What this deployment is: the service's version and the environment an operator named."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version

from serval_common.settings import Settings

DISTRIBUTION = "serval-live"
UNKNOWN_VERSION = "0+unknown"
"""A source checkout run without installing the distribution has no recorded version."""


@cache
def service_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN_VERSION


@dataclass(frozen=True)
class DeploymentInfo:
    deployment_version: str
    environment: str


def deployment_info(settings: Settings) -> DeploymentInfo:
    return DeploymentInfo(
        deployment_version=service_version(), environment=settings.api.deployment_environment
    )
