"""Starting and stopping the service processes the demo runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Run `python -m serval_cli ARGS` with its output in `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "serval_cli", *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def stop(process: subprocess.Popen[bytes], timeout_s: float = 20) -> int:
    """SIGTERM (which drains a node and stops the API service cleanly), then SIGKILL if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class RestClient:
    """Just enough HTTP+JSON for the demo, on the standard library."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    def call(self, method: str, path: str, body: Any = None, timeout_s: float = 60) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"X-API-Key": self.api_key, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def expect(self, status: int, method: str, path: str, body: Any = None, timeout_s: float = 60) -> Any:
        code, payload = self.call(method, path, body, timeout_s)
        if code != status:
            raise RuntimeError(f"{method} {path} answered {code} (expected {status}): {payload}")
        return payload

    def wait_until_up(self, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the API service exited with code {process.returncode}")
            try:
                if self.call("GET", "/api/v1/status/ping", timeout_s=2)[0] == 200:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the API service did not answer within {timeout_s:g} s")

    def wait_for_node(self, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
        """Until the API service's health counts a connected inference node."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the inference node exited with code {process.returncode}")
            code, payload = self.call("GET", "/api/v1/status/health", timeout_s=5)
            if code == 200 and payload.get("results", {}).get("nodes", "0") != "0":
                return
            time.sleep(0.2)
        raise RuntimeError(f"no inference node registered within {timeout_s:g} s")
