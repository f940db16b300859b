"""Small utilities the tests share: free loopback ports, waiting for servers, the shared corpus."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EBIBLE = REPO.parent / "shared" / "data" / "ebible-nt"


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
