from __future__ import annotations

import tempfile
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote


class StoreError(Exception):
    """A model store object is missing, unreadable or could not be written."""


def error_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and everything it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


class ObjectMissing(StoreError):
    """The object is not in the store."""


class StoreUnavailable(StoreError):
    """The store could not be reached or was overloaded (refused or dropped connections, timeouts,
    throttling, 5xx): trying again later may succeed."""


class InvalidKey(StoreError, ValueError):
    """A key that is not a clean relative path under the store's root or prefix. Nothing was read
    or written. The message quotes the key (cut), never the store's location."""


MAX_KEY_BYTES = 1024
"""S3's limit on a whole key (UTF-8), and so this store's on a key below its prefix."""

_SHOWN_CHARS = 60


def shown_key(key: str) -> str:
    return ascii(key if len(key) <= _SHOWN_CHARS else key[:_SHOWN_CHARS] + "…")


def segment_problem(segment: str) -> str | None:
    """Why `segment` cannot be one segment of a key or relative file path, or None when it can.

    Refused as written and as any layer might later read it (percent-decoded, NFKC-normalized,
    which turns look-alikes such as ONE DOT LEADER or fullwidth dots and solidus into `.` and
    `/`): empty, `.`, `..`, a slash or backslash inside, or a control or surrogate character."""
    if not segment:
        return "an empty segment"
    for form in _readings(segment):
        if form in (".", ".."):
            return f"a {form!r} segment"
        if "/" in form or "\\" in form:
            return "a slash or backslash within a segment"
        if any(unicodedata.category(c) in ("Cc", "Cs") for c in form):
            return "a control character"
    return None


def _readings(text: str, rounds: int = 4) -> set[str]:
    """`text` and what percent-decoding and NFKC normalization, repeated, make of it."""
    forms = {text}
    for _ in range(rounds):
        more = {unquote(f) for f in forms} | {unicodedata.normalize("NFKC", f) for f in forms}
        if more <= forms:
            break
        forms |= more
    return forms


def relative_path_problem(path: str, max_bytes: int = MAX_KEY_BYTES) -> str | None:
    """Why `path` is not a clean relative POSIX path (`a/b/c`), or None when it is."""
    if not path:
        return "it is empty"
    if len(path.encode("utf-8", "surrogatepass")) > max_bytes:
        return f"it is longer than {max_bytes} bytes"
    if path.startswith("/"):
        return "it is absolute"
    if "\\" in path:
        return "it holds a backslash"
    for segment in path.split("/"):
        problem = segment_problem(segment)
        if problem is not None:
            return f"it has {problem}"
    return None


def check_key(key: str) -> str:
    """`key` when it is a clean relative path (no `.`/`..`/empty segments, no trailing `/`, no
    backslash or control character, at most MAX_KEY_BYTES); else `InvalidKey`."""
    problem = relative_path_problem(key) if isinstance(key, str) else "it is not a string"
    if problem is not None:
        raise InvalidKey(f"invalid model store key {shown_key(str(key))}: {problem}")
    return key


class ModelStore(ABC):
    """Keys are POSIX paths relative to the store root (`models/{engineId}/{revision}/model.bin`).

    Every public method refuses a key or prefix that `check_key` refuses (`InvalidKey`) before it
    touches the store; implementations implement the underscored methods."""

    url: str

    def read_bytes(self, key: str) -> bytes:
        return self._read_bytes(check_key(key))

    def write_bytes(self, key: str, data: bytes) -> None:
        self._write_bytes(check_key(key), data)

    def upload_file(self, key: str, source: Path) -> None:
        self._upload_file(check_key(key), source)

    def download_file(self, key: str, target: Path) -> None:
        """Write the object to `target` (the caller renames it into place)."""
        self._download_file(check_key(key), target)

    def iter_bytes(self, key: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """Stream the object without holding it in memory. The key is checked now, not when the
        stream is first read."""
        return self._iter_bytes(check_key(key), chunk_size)

    def exists(self, key: str) -> bool:
        return self._exists(check_key(key))

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (a folder), sorted."""
        return self._list_keys(check_key(prefix))

    def delete(self, key: str) -> None:
        """Remove one object; a missing object is not an error."""
        self._delete(check_key(key))

    def delete_prefix(self, prefix: str) -> None:
        self._delete_prefix(check_key(prefix))

    @abstractmethod
    def _read_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def _write_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _upload_file(self, key: str, source: Path) -> None: ...

    @abstractmethod
    def _download_file(self, key: str, target: Path) -> None: ...

    def _iter_bytes(self, key: str, chunk_size: int) -> Iterator[bytes]:
        """Through a temporary file here."""
        with tempfile.TemporaryDirectory(prefix="serval-stream-") as folder:
            target = Path(folder) / "object"
            self._download_file(key, target)
            with target.open("rb") as fh:
                yield from iter(lambda: fh.read(chunk_size), b"")

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _list_keys(self, prefix: str) -> list[str]: ...

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _delete_prefix(self, prefix: str) -> None: ...
