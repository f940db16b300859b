"""A webhook receiver on 127.0.0.1 for the tests: a threaded HTTP server that records every POST
it gets, checks its signature, and can answer 500 the first N times."""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers import free_port


@dataclass(frozen=True)
class Received:
    body: bytes
    signature: str
    content_type: str
    host: str
    valid: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(
        self, secret: str, *, port: int | None = None, fail_first: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.secret = secret
        self.tls = tls
        self.port = port or free_port()
        self.fail_first = fail_first
        self.received: list[Received] = []
        self.failed = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = receiver._take(body, self.headers)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _take(self, body: bytes, headers: Any) -> int:
        with self._lock:
            if self.failed < self.fail_first:
                self.failed += 1
                return 500
            expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            signature = headers.get("X-Hub-Signature-256", "")
            self.received.append(
                Received(
                    body=body,
                    signature=signature,
                    content_type=headers.get("Content-Type", ""),
                    host=headers.get("Host", ""),
                    valid=hmac.compare_digest(signature, expected),
                )
            )
            return 200

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Received]:
        wait_until(lambda: len(self.received) >= count, timeout_s, f"{count} deliveries")
        return list(self.received)


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s} s")
        time.sleep(0.02)
