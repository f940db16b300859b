"""Small utilities the tests share: free loopback ports, waiting for servers, the shared corpus,
a fresh database per test."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from sqlalchemy.engine import make_url

from serval_common.store import ModelStore
from tests.corpus import EBIBLE, SHARED_DIR

REPO = Path(__file__).resolve().parents[1]
TEST_DATABASE_URL = "SERVAL_TEST_DATABASE_URL"


def unavailable(reason: str) -> NoReturn:
    """Skip a test for something this machine lacks (a tool, a package, the shared corpus), but fail
    it under CI (`CI=true`), where `make test` installs everything: a test skipped there for the
    machine's history would pass on one machine and never run on another."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"under CI every test runs, but this one lacks: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto_server(port: int) -> subprocess.Popen[bytes]:
    """A real S3-protocol server (moto) on a loopback port, listening once this returns; the
    caller terminates it."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        wait_for_port(port, server)
    except BaseException:
        server.terminate()
        raise
    return server


def wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout_s} s")


def verse_pairs(source: str, target: str, limit: int) -> tuple[list[str], list[str]]:
    """Line-aligned verses present in both texts (blank and merged `<range>` lines skipped)."""
    if not EBIBLE.is_dir():
        raise FileNotFoundError(
            f"the shared corpus is missing: expected {EBIBLE} (../shared beside the checkout, or "
            f"beside the checkout this one was cloned from; or set {SHARED_DIR})"
        )
    src_lines = (EBIBLE / f"{source}.txt").read_text(encoding="utf-8").splitlines()
    tgt_lines = (EBIBLE / f"{target}.txt").read_text(encoding="utf-8").splitlines()
    pairs = [
        (s.strip(), t.strip())
        for s, t in zip(src_lines, tgt_lines, strict=True)
        if s.strip() and t.strip() and "<range>" not in (s.strip(), t.strip())
    ]
    pairs = pairs[:limit]
    return [s for s, _ in pairs], [t for _, t in pairs]


@contextlib.contextmanager
def fresh_database(sqlite_dir: Path, *, migrated: bool = True) -> Iterator[str]:
    """The URL of a database of one's own: a SQLite file in `sqlite_dir`, or, when
    SERVAL_TEST_DATABASE_URL names a PostgreSQL server's maintenance database (`make test` sets it),
    a new uniquely named database there, dropped afterwards.

    It holds the newest schema and no rows: a copy of a template this test process migrated once,
    which spares each test the migrations (the service's own `migrate` then finds nothing to do).
    `migrated=False` gives an empty database instead, for tests of the migrations themselves."""
    server = os.environ.get(TEST_DATABASE_URL)
    if not server:
        path = (sqlite_dir / "serval.db").resolve()
        if migrated:
            _copy_sqlite(_sqlite_template(), path)
        yield f"sqlite:///{path}"
        return
    if make_url(server).get_backend_name() != "postgresql":
        raise ValueError(f"{TEST_DATABASE_URL} must be a postgresql:// URL, not {server!r}")
    name = f"serval_test_{uuid.uuid4().hex[:16]}"
    template = f' TEMPLATE "{_postgres_template(server)}"' if migrated else ""
    _postgres_execute(server, f'CREATE DATABASE "{name}"{template}')
    try:
        yield _database_url(server, name)
    finally:
        _postgres_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_templates_lock = threading.Lock()
_sqlite_template_path: Path | None = None
_postgres_templates: dict[str, str] = {}
"""Template database names by server URL."""


def _sqlite_template() -> Path:
    """A SQLite database migrated to the newest schema, made once per test process."""
    global _sqlite_template_path
    with _templates_lock:
        if _sqlite_template_path is None:
            folder = Path(tempfile.mkdtemp(prefix="serval-template-"))
            atexit.register(shutil.rmtree, folder, True)
            _migrate(f"sqlite:///{folder / 'serval.db'}")
            _sqlite_template_path = folder / "serval.db"
        return _sqlite_template_path


def _copy_sqlite(source: Path, target: Path) -> None:
    """Copy through SQLite's backup API, which gives a whole database whatever its journal holds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def _postgres_template(server: str) -> str:
    """The name of a database on `server` migrated to the newest schema, made once per test
    process and dropped at the session's end; new test databases are made from it (CREATE DATABASE …
    TEMPLATE), which PostgreSQL allows while nothing is connected to it."""
    with _templates_lock:
        if server not in _postgres_templates:
            name = f"serval_template_{uuid.uuid4().hex[:16]}"
            _postgres_execute(server, f'CREATE DATABASE "{name}"')
            _migrate(_database_url(server, name))
            _postgres_templates[server] = name
        return _postgres_templates[server]


def drop_database_templates() -> None:
    """Drop the PostgreSQL templates this process made (the session's end calls it)."""
    with _templates_lock:
        while _postgres_templates:
            server, name = _postgres_templates.popitem()
            _postgres_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _database_url(server: str, name: str) -> str:
    return make_url(server).set(database=name).render_as_string(hide_password=False)


def _migrate(url: str) -> None:
    from serval_api.db.database import Database

    async def migrate() -> None:
        db = Database(url)
        try:
            await db.migrate()
        finally:
            await db.close()

    _in_a_thread(migrate())


def _postgres_execute(server: str, sql: str) -> None:
    import asyncpg

    dsn = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)

    async def execute() -> None:
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    _in_a_thread(execute())


def _in_a_thread(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end on a thread of its own: the caller may be inside a running event
    loop (Playwright's sync API runs one), where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, work).result()


def distinct_weights(model_dir: Path, tag: str) -> Path:
    """A copy of `model_dir` with one file more, so its weights identity differs from the
    original's (as a fine-tune's would): revisions published from it are not aliases of one loaded
    model (`serval_common.model_revision`). Made once per tag beside `model_dir`."""
    target = model_dir.parent / f"{model_dir.name}-weights-{tag}"
    if not target.is_dir():
        partial = model_dir.parent / f".{target.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(model_dir, partial)
        (partial / "weights-variant.txt").write_text(f"{tag}\n")
        partial.rename(target)
    return target


def publish_tiny_base_model(store: ModelStore, ct2_dir: Path, name: str = "tiny") -> None:
    """Publish the session's tiny model as a base model, with the Hugging Face checkpoint beside
    it (`make_tiny_base_model` writes `hf/` next to `ct2/`) so builds can fine-tune it."""
    from build_jobs.publish import publish_base_model
    from serval_common.languages import NLLB_LANGUAGE_CODES

    publish_base_model(
        store,
        name,
        ct2_dir,
        languages=list(NLLB_LANGUAGE_CODES),
        quantization="int8",
        hf_dir=ct2_dir.parent / "hf",
    )


# Load, retries and process memory for the end-to-end failure tests (test_api_restart_under_load,
# test_two_replicas, test_soak).

RETRYABLE_STATUSES = frozenset({502, 503, 504})
"""Statuses a client retries: the service is restarting or has no capacity right now."""


@dataclass(frozen=True)
class ClientRetryPolicy:
    """What a well-behaved client of a service that restarts does: retry a failed connection, a
    connection dropped mid-request (translation is idempotent) and 502/503/504, with exponential
    backoff (honoring Retry-After up to `max_backoff_s`), trying the next replica first when it
    knows several, until `budget_s` has passed since the request began."""

    budget_s: float = 60.0
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 1.0
    attempt_timeout_s: float = 45.0


@dataclass
class Answer:
    """One request's outcome, however many attempts it took."""

    started: float
    finished: float
    status: int
    attempts: int
    replica: int
    revision: str | None


class Tally:
    """The figures of one scenario, shared by its client threads: requests `sent` (each counted
    once), `answered` (200), `failed` (after retries, or with a status no retry helps),
    `retried` (attempts beyond each request's first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.answered = 0
        self.failed = 0
        self.retried = 0
        self.answers: list[Answer] = []
        self.failures: list[str] = []

    def record(self, answer: Answer | None, failure: str | None = None) -> None:
        with self._lock:
            self.sent += 1
            if answer is not None:
                self.answers.append(answer)
                self.retried += answer.attempts - 1
                if answer.status == 200:
                    self.answered += 1
            if failure is not None:
                self.failed += 1
                self.failures.append(failure)

    def answered_since(self, since: float) -> int:
        """200s to requests begun after `since`."""
        with self._lock:
            return sum(1 for a in self.answers if a.status == 200 and a.started > since)

    def first_answer_after(self, since: float) -> float | None:
        """Seconds from `since` to the first 200 that arrived after it."""
        with self._lock:
            times = [a.finished for a in self.answers if a.status == 200 and a.finished > since]
        return min(times) - since if times else None

    def summary(self) -> str:
        return f"{self.sent} sent, {self.answered} answered, {self.failed} failed, {self.retried} retried"


def send_with_retries(
    clients: Sequence[httpx.Client],
    method: str,
    path: str,
    tally: Tally,
    *,
    json: Any = None,
    prefer: int = 0,
    policy: ClientRetryPolicy = ClientRetryPolicy(),
) -> httpx.Response | None:
    """Send one request as `policy` says, starting with `clients[prefer]` (one client per replica),
    and record its outcome in `tally`. Returns the final response, or None when every attempt
    failed to connect or was cut off."""
    began = time.monotonic()
    backoff = policy.initial_backoff_s
    replica = prefer
    attempts = 0
    while True:
        attempts += 1
        response: httpx.Response | None = None
        try:
            response = clients[replica].request(method, path, json=json, timeout=policy.attempt_timeout_s)
            problem = f"{response.status_code} {response.text[:200]}"
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if response is not None and response.status_code not in RETRYABLE_STATUSES:
            answer = Answer(
                began,
                time.monotonic(),
                response.status_code,
                attempts,
                replica,
                response.headers.get("X-Model-Revision"),
            )
            failure = None if response.is_success else f"{method} {path}: {problem}"
            tally.record(answer, failure)
            return response
        tried, replica = replica, (replica + 1) % len(clients)
        wait = 0.0
        if replica == prefer:  # every replica tried once more: back off
            retry_after = response.headers.get("Retry-After", "") if response is not None else ""
            wait = min(policy.max_backoff_s, float(retry_after) if retry_after.isdigit() else backoff)
            backoff = min(backoff * 2, policy.max_backoff_s)
        if time.monotonic() + wait - began > policy.budget_s:
            status = response.status_code if response is not None else 0
            tally.record(
                Answer(began, time.monotonic(), status, attempts, tried, None),
                f"{method} {path}: gave up after {attempts} attempts: {problem}",
            )
            return response
        time.sleep(wait)


class Load:
    """At most `total` requests (and none begun after `duration_s`, when given) from `threads`
    client threads; `send(thread, index)` makes request number `index` on client thread `thread`
    and records it. Each thread pauses `pause_s` between its requests."""

    def __init__(
        self,
        send: Callable[[int, int], None],
        *,
        total: int,
        threads: int,
        duration_s: float | None = None,
        pause_s: float = 0.0,
    ) -> None:
        self._send = send
        self.total = total
        self.pause_s = pause_s
        self.duration_s = duration_s
        self._next = 0
        self._lock = threading.Lock()
        self._deadline = float("inf")
        self.errors: list[BaseException] = []
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def start(self) -> Load:
        if self.duration_s is not None:
            self._deadline = time.monotonic() + self.duration_s
        for thread in self._threads:
            thread.start()
        return self

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.total or time.monotonic() >= self._deadline:
                return None
            self._next += 1
            return self._next - 1

    def _run(self, thread: int) -> None:
        while (index := self._take()) is not None:
            try:
                self._send(thread, index)
            except BaseException as exc:  # a bug in the test's own client code: surface it in join()
                self.errors.append(exc)
                return
            if self.pause_s:
                time.sleep(self.pause_s)

    @property
    def begun(self) -> int:
        with self._lock:
            return self._next

    def stop(self) -> None:
        """Begin no more requests."""
        with self._lock:
            self.total = min(self.total, self._next)

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), f"client threads still busy after {timeout_s} s"
        if self.errors:
            raise self.errors[0]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.05) -> float:
    """Poll `condition` until true; return how long that took. Fails with `what` after `timeout_s`."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout_s, f"{what} (not within {timeout_s:g} s)"
        time.sleep(interval_s)
    return time.monotonic() - began


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid` (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for process {pid}")


def metrics_text(rest_base_url: str, timeout_s: float = 60) -> str:
    """The API replica's Prometheus metrics (`/metrics`). The default timeout is generous: on a
    loaded 2-core machine (both test passes, a build job starting) one scrape has taken over 5 s."""
    response = httpx.get(f"{rest_base_url.rstrip('/')}/metrics", timeout=timeout_s)
    response.raise_for_status()
    return response.text


def connected_sessions(rest_base_url: str) -> int:
    """Node sessions connected to the API replica at `rest_base_url` (its `/metrics`); -1 when
    it does not answer."""
    try:
        text = metrics_text(rest_base_url, timeout_s=5)
    except httpx.HTTPError:
        return -1
    for line in text.splitlines():
        if line.startswith("serval_api_connected_inference_nodes "):
            return int(float(line.split()[1]))
    return -1
