"""Starting and stopping the service processes the demo runs."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

NETWORK_ERRORS: tuple[type[Exception], ...] = (
    urllib.error.URLError,
    ConnectionError,
    TimeoutError,
    http.client.HTTPException,
)
"""What `RestClient` raises when the service cannot be reached or the connection breaks."""


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
    """Just enough HTTP+JSON for the demo and `serval build`, on the standard library.

    Network failures (refused connections, timeouts, dropped sockets) raise as `NETWORK_ERRORS`;
    HTTP error statuses come back as `(status, payload)`."""

    def __init__(self, base_url: str, api_key: str | None, ca_file: str | Path | None = None) -> None:
        """`ca_file` (default: `SERVAL_CA_FILE`) holds the PEM certificates an `https://` service's
        certificate must chain to; without it the system's trusted roots are used."""
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        ca_file = ca_file or os.environ.get("SERVAL_CA_FILE") or None
        self._ssl = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
        self.last_headers: dict[str, str] = {}
        """The last answer's response headers, names in lower case (e.g. `x-model-revision`)."""

    def call(self, method: str, path: str, body: Any = None, timeout_s: float = 60) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        return self._send(method, path, data, "application/json", timeout_s)

    def upload(
        self, path: str, fields: dict[str, str], filename: str, contents: bytes, timeout_s: float = 60
    ) -> tuple[int, Any]:
        """POST a multipart/form-data body: the text `fields` and one file part named `file`."""
        boundary = f"serval-{uuid.uuid4().hex}"
        parts = [
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
            for name, value in fields.items()
        ]
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
            + contents
            + b"\r\n"
        )
        data = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return self._send("POST", path, data, f"multipart/form-data; boundary={boundary}", timeout_s)

    def _send(
        self, method: str, path: str, data: bytes | None, content_type: str, timeout_s: float
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type}
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=self._ssl) as response:
                self.last_headers = {k.lower(): v for k, v in response.headers.items()}
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            self.last_headers = {k.lower(): v for k, v in exc.headers.items()}
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
            if code in (401, 403):
                raise RuntimeError(
                    f"the API key cannot read /status/health ({code}): it needs the scope read:status"
                )
            nodes = payload.get("results", {}).get("nodes", {}).get("data", {})
            if code == 200 and nodes.get("connected", "0") != "0":
                return
            time.sleep(0.2)
        raise RuntimeError(f"no inference node registered within {timeout_s:g} s")
