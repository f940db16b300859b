from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from serval_common.settings import Settings


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


class ModelStore(ABC):
    """Keys are POSIX paths relative to the store root (`models/{engineId}/{revision}/model.bin`)."""

    url: str

    @abstractmethod
    def read_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def upload_file(self, key: str, source: Path) -> None: ...

    @abstractmethod
    def download_file(self, key: str, target: Path) -> None:
        """Write the object to `target` (the caller renames it into place)."""

    def iter_bytes(self, key: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """Stream the object without holding it in memory (through a temporary file here)."""
        with tempfile.TemporaryDirectory(prefix="serval-stream-") as folder:
            target = Path(folder) / "object"
            self.download_file(key, target)
            with target.open("rb") as fh:
                yield from iter(lambda: fh.read(chunk_size), b"")

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (a folder), sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object; a missing object is not an error."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None: ...


def open_store(url: str, **s3_options: str | None) -> ModelStore:
    """Open `file:///path` (or a bare path) as a local store, `s3://bucket/prefix` as S3."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        from serval_common.store.local import LocalStore

        return LocalStore(Path(parsed.path if parsed.scheme else url))
    if parsed.scheme == "s3":
        from serval_common.store.s3 import S3Store

        return S3Store(bucket=parsed.netloc, prefix=parsed.path.strip("/"), **s3_options)
    raise StoreError(f"unsupported model store URL {url!r}: use file:///path or s3://bucket/prefix")


def store_from_settings(settings: Settings, url: str | None = None) -> ModelStore:
    """The model store the settings name (or `url` in it, e.g. the one a build job was given)."""
    return open_store(
        url or settings.resolved_store_url,
        endpoint_url=settings.store.s3_endpoint_url,
        region=settings.store.s3_region,
        access_key_id=settings.store.s3_access_key_id,
        secret_access_key=settings.store.s3_secret_access_key,
    )
