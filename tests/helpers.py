"""Small utilities the tests share: free loopback ports, waiting for servers, the shared corpus,
a fresh database per test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

from serval_common.store import ModelStore

REPO = Path(__file__).resolve().parents[1]
EBIBLE = REPO.parent / "shared" / "data" / "ebible-nt"
TEST_DATABASE_URL = "SERVAL_TEST_DATABASE_URL"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
            f"the shared corpus is missing: expected {EBIBLE} (../shared beside the checkout)"
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
def fresh_database(sqlite_dir: Path) -> Iterator[str]:
    """The URL of an empty database of one's own: a SQLite file in `sqlite_dir`, or, when
    SERVAL_TEST_DATABASE_URL names a PostgreSQL server's maintenance database (`make test` sets it),
    a new uniquely named database there, dropped afterwards."""
    server = os.environ.get(TEST_DATABASE_URL)
    if not server:
        yield f"sqlite:///{(sqlite_dir / 'serval.db').resolve()}"
        return
    if make_url(server).get_backend_name() != "postgresql":
        raise ValueError(f"{TEST_DATABASE_URL} must be a postgresql:// URL, not {server!r}")
    name = f"serval_test_{uuid.uuid4().hex[:16]}"
    _postgres_execute(server, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        _postgres_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _postgres_execute(server: str, sql: str) -> None:
    import asyncpg

    dsn = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)

    async def execute() -> None:
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    asyncio.run(execute())


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
