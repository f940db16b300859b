"""Data file contents, in the database: `data_file_chunks`, 1 MiB a row, `seq` from 0.

Serval keeps data files beside its records (`DataFileOptions.FilesDirectory`), so an upload needs
nothing its records do not. Here the database is that one thing every API replica shares, so an
upload, a download and a file's deletion need only the database; a build copies what it reads into
its export in the model store when it starts, as before.

A file written here has at least one chunk (an empty one for an empty file). A file uploaded before
chunks existed has none: its contents are still in the model store at `files/{id}/contents`, read
from there (`contents_key`), and removed from there when the file is deleted or replaced.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.models import DataFileChunkRow, DataFileRow
from serval_api.service.context import Services
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
_LOCATION = re.compile(r"^files/([^/]+)/contents$")


class ContentsChanged(RuntimeError):
    """A file replaced or deleted while its contents streamed: the answer has started, so the
    download is cut off rather than given a mix of two revisions (the client sees it fail)."""


def contents_key(file_id: str) -> str:
    """A data file's location in a build's corpora, and where a file uploaded before chunks
    existed keeps its contents in the model store."""
    return f"files/{file_id}/contents"


def _legacy_prefix(file_id: str) -> str:
    return f"files/{file_id}"


async def write(s: AsyncSession, file_id: str, source: Path) -> int:
    """In `s`'s transaction, make `source` the file's contents (replacing any chunks it has):
    read and inserted 1 MiB at a time, never whole. Returns the size written."""
    await s.execute(delete(DataFileChunkRow).where(DataFileChunkRow.file_id == file_id))
    size = 0
    with source.open("rb") as f:
        for seq in itertools.count():
            data = await asyncio.to_thread(f.read, CHUNK_BYTES)
            if seq and not data:
                break
            await s.execute(insert(DataFileChunkRow).values(file_id=file_id, seq=seq, data=data))
            size += len(data)
    return size


async def in_store(s: AsyncSession, file_id: str) -> bool:
    """Whether the file has no chunk, so its contents are (or were) in the model store."""
    return await _chunk(s, file_id, 0) is None


async def delete_chunks(s: AsyncSession, file_id: str) -> None:
    await s.execute(delete(DataFileChunkRow).where(DataFileChunkRow.file_id == file_id))


async def remove_from_store(services: Services, file_id: str) -> None:
    """Remove a file's old contents from the model store; a store that fails is only logged,
    since the file needs nothing there any more: the store sweep removes them later."""
    try:
        await services.store_call(services.store.delete_prefix, _legacy_prefix(file_id))
    except Exception:
        log.warning("old file contents left in the model store for the sweep", extra={"file_id": file_id})


async def first_chunk(s: AsyncSession, file_id: str) -> bytes | None:
    """Chunk 0, read in the transaction that read the file; None: its contents are in the store."""
    return await _chunk(s, file_id, 0)


async def stream(
    services: Services, store: ModelStore, file: DataFileRow, first: bytes | None
) -> AsyncIterator[bytes]:
    """The file's bytes in chunks of at most 1 MiB, never held whole, from its `first_chunk` on
    (from the model store when that is None, its first piece read now): a failure to start is
    raised before an answer does. Each later chunk is read in a session of its own, so a slow
    client holds no transaction open."""
    if first is None:
        chunks = store.iter_bytes(contents_key(file.id), CHUNK_BYTES)
        head = await services.store_call(next, chunks, b"")
        return _from_store(services, head, chunks)
    return _from_database(services, file, first)


async def _from_store(services: Services, head: bytes, chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    while chunk := await services.store_call(next, chunks, b""):
        yield chunk


async def _from_database(services: Services, file: DataFileRow, first: bytes) -> AsyncIterator[bytes]:
    yield first
    for seq in itertools.count(1):
        async with services.db.session() as s:
            current = await s.scalar(select(DataFileRow.revision).where(DataFileRow.id == file.id))
            data = await _chunk(s, file.id, seq)
        if current != file.revision:
            # Replaced or deleted mid-download: stop rather than send a mix of two revisions.
            raise ContentsChanged(file.id)
        if data is None:
            return
        yield data


async def copy_to(services: Services, store: ModelStore, file_id: str, target: Path) -> None:
    """Write the file's contents to the local path `target`, one chunk at a time, in one
    transaction (a consistent revision); from the model store when it has no chunk."""
    async with services.db.session() as s:
        first = await _chunk(s, file_id, 0)
        if first is not None:
            with target.open("wb") as f:
                await _write_chunks(s, file_id, first, f)
            return
    await services.store_call(store.download_file, contents_key(file_id), target)


async def _write_chunks(s: AsyncSession, file_id: str, first: bytes, f: BinaryIO) -> None:
    data: bytes | None = first
    seq = 0
    while data is not None:
        await asyncio.to_thread(f.write, data)
        seq += 1
        data = await _chunk(s, file_id, seq)


async def _chunk(s: AsyncSession, file_id: str, seq: int) -> bytes | None:
    data: bytes | None = await s.scalar(
        select(DataFileChunkRow.data).where(DataFileChunkRow.file_id == file_id, DataFileChunkRow.seq == seq)
    )
    return data


class Downloads(Protocol):
    """What the blocking readers of corpus files (the build export, USFM) download through."""

    def download_file(self, key: str, target: Path) -> None: ...


class ContentsReader:
    """`Downloads` for a worker thread: a data file's location (`contents_key`) is copied from the
    database on the event loop that made this reader (which awaits the thread meanwhile); any
    other key is read from the model store, on the store's own threads (`Services.store_call`).
    So the reading thread, which may run long (the build export, USFM), never runs on those
    threads itself and never waits on one of them from one of them."""

    def __init__(self, services: Services, store: ModelStore) -> None:
        self._services, self._store = services, store
        self._loop = asyncio.get_running_loop()

    def download_file(self, key: str, target: Path) -> None:
        match = _LOCATION.match(key)
        if match is None:
            copy = self._services.store_call(self._store.download_file, key, target)
        else:
            copy = copy_to(self._services, self._store, match.group(1), target)
        asyncio.run_coroutine_threadsafe(copy, self._loop).result()
