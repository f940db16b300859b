"""Optional py-spy profiles of the service processes while one scenario runs."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType


class Profiler:
    """`py-spy record` on each named process for the duration of a `with` block; a no-op without a
    folder. Each profile is a file of collapsed stacks (`LABEL-PROCESS.txt`, one `frames count` line
    per stack, the input of flamegraph tools), which `python -m bench.profile_summary` ranks."""

    def __init__(self, folder: Path | None, pids: dict[str, int], label: str) -> None:
        self.folder = folder
        self.pids = pids
        self.label = label
        self._spies: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Profiler:
        if self.folder is None:
            return self
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if spy is None:
            raise RuntimeError("--profile needs py-spy: pip install -e '.[bench]'")
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, pid in self.pids.items():
            out = self.folder / f"{self.label}-{name}.txt"
            self._spies.append(
                subprocess.Popen(
                    [spy, "record", "--pid", str(pid), "--rate", "500", "--gil", "--format", "raw", "--output", str(out), "--threads"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for spy in self._spies:
            spy.send_signal(signal.SIGINT)
        for spy in self._spies:
            spy.wait(timeout=30)
