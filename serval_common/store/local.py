from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from serval_common.store.base import InvalidKey, ModelStore, ObjectMissing, shown_key


class LocalStore(ModelStore):
    """A model store in a local folder: the embedded default."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        """Keys are clean relative paths by now; this also refuses one that a symbolic link in the
        store folder would lead out of it."""
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise InvalidKey(f"invalid model store key {shown_key(key)}: it leaves the store")
        return path

    def _read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise ObjectMissing(f"{key} is not in the model store {self.url}") from exc

    def _write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)

    def _upload_file(self, key: str, source: Path) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{path.name}")
        shutil.copyfile(source, tmp)
        os.replace(tmp, path)

    def _download_file(self, key: str, target: Path) -> None:
        try:
            shutil.copyfile(self._path(key), target)
        except FileNotFoundError as exc:
            raise ObjectMissing(f"{key} is not in the model store {self.url}") from exc

    def _iter_bytes(self, key: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        try:
            fh = self._path(key).open("rb")
        except FileNotFoundError as exc:
            raise ObjectMissing(f"{key} is not in the model store {self.url}") from exc
        with fh:
            yield from iter(lambda: fh.read(chunk_size), b"")

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _list_keys(self, prefix: str) -> list[str]:
        folder = self._path(prefix)
        if not folder.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        )

    def _delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def _delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)
