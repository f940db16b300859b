"""The job launcher `jobs.launcher` names."""

from __future__ import annotations

from serval_api.service.launcher import JobLauncher
from serval_common.settings import Settings

LAUNCHERS = ("local", "clearml")


def launcher_from_settings(settings: Settings) -> JobLauncher:
    """`local` runs jobs as child processes; `clearml` queues them as ClearML tasks, which needs
    the optional `clearml` package."""
    kind = settings.jobs.launcher.strip().lower()
    if kind == "local":
        from serval_api.builds.local import LocalJobLauncher

        return LocalJobLauncher(settings)
    if kind == "clearml":
        try:
            import clearml  # noqa: F401
        except ImportError as exc:
            raise RuntimeError(
                "jobs.launcher is 'clearml' but the clearml package is not installed: install the "
                "`clearml` extra (pip install 'serval-live[clearml]')"
            ) from exc
        from serval_api.builds.clearml_launcher import ClearMLJobLauncher

        return ClearMLJobLauncher(settings)
    raise ValueError(
        f"unknown jobs.launcher {settings.jobs.launcher!r} (SERVAL_JOBS__LAUNCHER): use one of {', '.join(LAUNCHERS)}"
    )
