"""Data files: a client's uploads. Their contents live in the model store at `files/{id}/contents`."""

from __future__ import annotations

import asyncio
import codecs
import itertools
import logging
import zipfile
from collections.abc import Iterator
from enum import StrEnum
from functools import cache
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import CREATE_FILES, DELETE_FILES, READ_FILES, UPDATE_FILES, Caller
from serval_api.db.models import Corpus, DataFile, EngineCorpus, utcnow
from serval_api.errors import Conflict, InvalidArgument, NotFound, PayloadTooLarge
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.keys import new_id
from serval_common.settings import Settings
from serval_common.store import ModelStore, open_store

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


class FileFormat(StrEnum):
    TEXT = "Text"
    PARATEXT = "Paratext"


CONTENT_TYPES = {FileFormat.TEXT: "text/plain; charset=utf-8", FileFormat.PARATEXT: "application/zip"}


def parse_format(value: str) -> FileFormat:
    for fmt in FileFormat:
        if value.strip().lower() == fmt.value.lower():
            return fmt
    allowed = ", ".join(f.value for f in FileFormat)
    raise InvalidArgument(
        f"format: unsupported file format {limits.shown(value)}; expected one of: {allowed}"
    )


def contents_key(file_id: str) -> str:
    return f"files/{file_id}/contents"


def default_text_id(file: DataFile) -> str:
    """A file's name without its extension, or its id when it has no name."""
    return PurePosixPath(file.name).stem if file.name else file.id


def model_store(settings: Settings) -> ModelStore:
    return _store(
        settings.resolved_store_url,
        settings.store.s3_endpoint_url,
        settings.store.s3_region,
        settings.store.s3_access_key_id,
        settings.store.s3_secret_access_key,
    )


@cache
def _store(
    url: str, endpoint: str | None, region: str | None, key_id: str | None, secret: str | None
) -> ModelStore:
    return open_store(
        url, endpoint_url=endpoint, region=region, access_key_id=key_id, secret_access_key=secret
    )


def check_size(settings: Settings, size: int) -> None:
    limit = settings.api.max_upload_bytes
    if size > limit:
        raise PayloadTooLarge(f"file: the upload is larger than the limit of {limit} bytes")


def validate_contents(path: Path, fmt: FileFormat) -> None:
    """Blocking: a Text file must be UTF-8, a Paratext file a zip archive."""
    if fmt == FileFormat.PARATEXT:
        if not zipfile.is_zipfile(path):
            raise InvalidArgument("file: a Paratext file must be a zip archive of a Paratext project")
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                decoder.decode(chunk)
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        raise InvalidArgument(
            f"file: a Text file must be UTF-8 (invalid byte near offset {offset + e.start})"
        ) from None


async def owned_file(s: AsyncSession, caller: Caller, file_id: str, *, lock: bool = False) -> DataFile:
    """Another owner's file answers 404, so ids don't leak. `lock` holds the row for an update."""
    if not limits.can_be_id(file_id):
        raise NotFound(f"file {limits.shown(file_id)} not found")
    file = await s.get(DataFile, file_id, with_for_update=True if lock else None)
    if file is None or file.owner != caller.owner:
        raise NotFound(f"file {file_id} not found")
    return file


async def _store_contents(services: Services, file_id: str, contents: Path, fmt: FileFormat) -> int:
    size = contents.stat().st_size
    check_size(services.settings, size)
    await asyncio.to_thread(validate_contents, contents, fmt)
    await asyncio.to_thread(model_store(services.settings).upload_file, contents_key(file_id), contents)
    return size


async def create_file(
    services: Services, caller: Caller, *, contents: Path, format: str, name: str | None = None
) -> DataFile:
    caller.require(CREATE_FILES)
    fmt = parse_format(format)
    limits.optional_segment_name("name", name, limits.FILE_NAME_CHARS)
    file_id = new_id()
    size = await _store_contents(services, file_id, contents, fmt)
    file = DataFile(
        id=file_id,
        owner=caller.owner,
        name=name,
        format=fmt.value,
        revision=1,
        size=size,
        date_created=utcnow(),
    )
    try:
        async with services.db.session() as s:
            s.add(file)
    except BaseException:
        await asyncio.shield(_delete_contents(services, file_id))
        raise
    log.info("file created", extra={"file_id": file.id, "format": fmt.value, "size": size})
    return file


async def list_files(services: Services, caller: Caller) -> list[DataFile]:
    caller.require(READ_FILES)
    query = (
        select(DataFile).where(DataFile.owner == caller.owner).order_by(DataFile.date_created, DataFile.id)
    )
    async with services.db.session() as s:
        return list((await s.scalars(query)).all())


async def get_file(services: Services, caller: Caller, file_id: str) -> DataFile:
    caller.require(READ_FILES)
    async with services.db.session() as s:
        return await owned_file(s, caller, file_id)


async def open_contents(services: Services, caller: Caller, file_id: str) -> tuple[DataFile, Iterator[bytes]]:
    """The file and its bytes in chunks of at most 1 MiB, never held whole. The first chunk is read
    here, so a store failure is raised before an answer starts."""
    file = await get_file(services, caller, file_id)
    chunks = model_store(services.settings).iter_bytes(contents_key(file.id), _CHUNK)
    first = await asyncio.to_thread(next, chunks, b"")
    return file, itertools.chain((first,), chunks)


async def replace_contents(services: Services, caller: Caller, file_id: str, *, contents: Path) -> DataFile:
    caller.require(UPDATE_FILES)
    async with services.db.session() as s:
        file = await owned_file(s, caller, file_id)
    size = await _store_contents(services, file.id, contents, FileFormat(file.format))
    try:
        async with services.db.session() as s:
            file = await owned_file(s, caller, file_id, lock=True)
            file.size = size
            file.revision += 1
    except NotFound:
        # Deleted while the new contents were uploaded: they must not outlive it.
        await asyncio.shield(_delete_contents(services, file_id))
        raise
    log.info("file contents replaced", extra={"file_id": file.id, "revision": file.revision})
    return file


async def delete_file(services: Services, caller: Caller, file_id: str) -> None:
    """A file that a corpus or an engine corpus still names cannot be deleted (409)."""
    caller.require(DELETE_FILES)
    async with services.db.session() as s:
        file = await owned_file(s, caller, file_id)
        for corpus in (await s.scalars(select(Corpus).where(Corpus.owner == caller.owner))).all():
            if any(entry["fileId"] == file_id for entry in corpus.files):
                raise Conflict(
                    f"file {file_id} is used by corpus {corpus.id}; remove it from the corpus first"
                )
        query = select(EngineCorpus).where(EngineCorpus.owner == caller.owner)
        for ec in (await s.scalars(query)).all():
            if any(entry["fileId"] == file_id for entry in (*ec.source_files, *ec.target_files)):
                raise Conflict(
                    f"file {file_id} is used by corpus {ec.id} of engine {ec.engine_id}; "
                    "remove it from the corpus first"
                )
        await s.delete(file)
    await asyncio.shield(_delete_contents(services, file_id))
    log.info("file deleted", extra={"file_id": file_id})


async def _delete_contents(services: Services, file_id: str) -> None:
    await asyncio.to_thread(model_store(services.settings).delete_prefix, f"files/{file_id}")
