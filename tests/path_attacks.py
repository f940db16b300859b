"""Traversal and odd strings, and what watches that a refused one read or wrote nothing outside the
model store: every file-system access this process makes (Python's audit hooks, which see the API
service's thread too) and every S3 request any boto3 client created afterwards sends (botocore's
events), plus a sentinel file or object outside the store that must stay as it was."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

TRAVERSALS: tuple[str, ...] = (
    "..",
    "../x",
    "/etc/passwd",
    "a/../../b",
    "%2e%2e/",
    "%2e%2e",
    "..%2f",
    "..\\x",
    "a\\..\\..\\b",
    "a\x00b",
    "a\nb",
    "\u2024\u2024/",
    "\u2024\u2024",
    "．．／",
    "．．",
    "a//b",
    "./a",
    ".",
    "x" * 5000,
)
"""Refused wherever a client string can become part of a store key or a file path."""

STORE_ONLY: tuple[str, ...] = ("", "a/", "a/.", "/", "models/e1/1/")
"""Refused as store keys (an empty segment, a trailing slash)."""


def escapes(outside: Path, store_root: Path) -> tuple[str, ...]:
    """Strings aimed at `outside`, a folder next to the store's root."""
    relative = os.path.relpath(outside, store_root)
    return (f"{relative}/secret", f"files/../../{outside.name}/secret", str(outside / "secret"))


_FS_EVENTS = {
    "open",
    "os.listdir",
    "os.scandir",
    "os.mkdir",
    "os.remove",
    "os.rmdir",
    "os.rename",
    "os.replace",
    "os.truncate",
    "os.chmod",
    "os.utime",
    "os.symlink",
    "os.link",
    "shutil.copyfile",
    "shutil.rmtree",
    "shutil.move",
}
_watchers: list[FileSystemWatch] = []
_lock = threading.Lock()
_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _FS_EVENTS or not _watchers:
        return
    paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
    with _lock:
        for watch in _watchers:
            for p in paths:
                watch.seen.append(os.fsdecode(p))


@dataclass
class FileSystemWatch:
    seen: list[str] = field(default_factory=list)

    def touched(self, folder: Path) -> list[str]:
        """Paths accessed at or under `folder` (however they were spelled)."""
        folder = folder.resolve()
        hits = []
        for raw in self.seen:
            try:
                resolved = Path(os.path.abspath(raw)).resolve()
            except (ValueError, OSError):
                resolved = Path(os.path.normpath(os.path.abspath(raw.replace("\x00", ""))))
            if resolved == folder or resolved.is_relative_to(folder):
                hits.append(raw)
        return hits


@contextmanager
def watch_file_system() -> Iterator[FileSystemWatch]:
    global _installed
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True
    watch = FileSystemWatch()
    with _lock:
        _watchers.append(watch)
    try:
        yield watch
    finally:
        with _lock:
            _watchers.remove(watch)


@dataclass
class S3Watch:
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def outside(self, bucket: str, prefix: str) -> list[tuple[str, dict[str, Any]]]:
        """Requests naming a key or listing prefix that is not under `prefix/` of `bucket`."""
        wrong = []
        for operation, params in self.requests:
            if params.get("Bucket") not in (None, bucket):
                wrong.append((operation, params))
                continue
            keys = [params[name] for name in ("Key", "Prefix") if name in params]
            keys += [o["Key"] for o in params.get("Delete", {}).get("Objects", [])]
            if any(not str(k).startswith(f"{prefix}/") for k in keys):
                wrong.append((operation, params))
        return wrong


@contextmanager
def watch_s3() -> Iterator[S3Watch]:
    """Every S3 request of the clients boto3 creates from now on (they copy the default session's
    event handlers when created)."""
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    events = boto3.DEFAULT_SESSION.events
    watch = S3Watch()

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        watch.requests.append((model.name, dict(params)))

    events.register("provide-client-params.s3", record, unique_id="path-attacks-watch")
    try:
        yield watch
    finally:
        events.unregister("provide-client-params.s3", unique_id="path-attacks-watch")


def folder_state(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under `folder`: sha256 and mtime."""
    return {
        p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def bucket_state(endpoint: str, bucket: str) -> dict[str, tuple[str, str]]:
    """Every object in the bucket: ETag and last-modified time (read by a client created here,
    before or after a watch, so its own requests are not watched)."""
    client = boto3.client("s3", endpoint_url=endpoint)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {
        obj["Key"]: (obj["ETag"], obj["LastModified"].isoformat())
        for page in pages
        for obj in page.get("Contents", [])
    }


@contextmanager
def paused(watch: FileSystemWatch) -> Iterator[None]:
    """The test's own reads (of the sentinel, say) are not the code under test's."""
    with _lock:
        _watchers.remove(watch)
    try:
        yield
    finally:
        with _lock:
            _watchers.append(watch)
