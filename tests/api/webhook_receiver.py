"""Webhook receivers on 127.0.0.1 for the tests: a threaded HTTP server that records every POST
it gets, checks its signature, can answer 500 the first N times and take its time to answer; and
a silent one that accepts connections and never answers (a hostile tenant's receiver)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
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
        self,
        secret: str,
        *,
        port: int | None = None,
        fail_first: int = 0,
        tls: ssl.SSLContext | None = None,
        delay_s: float = 0.0,
    ) -> None:
        """`delay_s`: how long each POST waits before it is answered."""
        self.secret = secret
        self.tls = tls
        self.port = port or free_port()
        self.fail_first = fail_first
        self.delay_s = delay_s
        self.received: list[Received] = []
        self.failed = 0
        self.concurrent = 0
        self.max_concurrent = 0
        """The most POSTs it was answering at once."""
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
                with receiver._lock:
                    receiver.concurrent += 1
                    receiver.max_concurrent = max(receiver.max_concurrent, receiver.concurrent)
                try:
                    time.sleep(receiver.delay_s)
                    status = receiver._take(body, self.headers)
                finally:
                    with receiver._lock:
                        receiver.concurrent -= 1
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


class Silent:
    """Accepts connections, reads what they send and never answers: every POST to it hangs until
    the sender gives up. `open`: connections the senders have not closed yet."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.port: int = self._socket.getsockname()[1]
        self.accepted = 0
        self.open = 0
        self._lock = threading.Lock()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Silent:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with self._lock:
                self._held.append(connection)
                self.accepted += 1
                self.open += 1
            threading.Thread(target=self._drain, args=(connection,), daemon=True).start()

    def _drain(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while connection.recv(65536):
                pass
        with self._lock:
            self.open -= 1

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._socket.close()
        with self._lock:
            held = list(self._held)
        for connection in held:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s} s")
        time.sleep(0.02)
