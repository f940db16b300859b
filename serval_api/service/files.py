"""Data files: a client's uploads. Their contents live in the database (`file_contents`)."""

from __future__ import annotations

import asyncio
import codecs
import logging
import zipfile
from collections.abc import AsyncIterator
from enum import StrEnum
from pathlib import Path, PurePosixPath

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import CREATE_FILES, DELETE_FILES, READ_FILES, UPDATE_FILES, Caller
from serval_api.db.models import DataFileRow, utcnow
from serval_api.errors import InvalidArgument
from serval_api.service import file_contents, limits, owners
from serval_api.service.context import Services
from serval_api.service.file_references import remove_file_everywhere
from serval_api.service.keys import new_id
from serval_common.settings import Settings

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


def default_text_id(file: DataFileRow) -> str:
    """A file's name without its extension, or its id when it has no name."""
    return PurePosixPath(file.name).stem if file.name else file.id


def too_large(limit: int) -> InvalidArgument:
    """An upload over `api.max_upload_bytes`: 400, as Serval answers it. Serval's `[RequestSizeLimit]`
    makes Kestrel refuse the body, but its controllers read the form in model binding, which turns
    that refusal into a 400 (its `POST /files` documents 400 "Is the file over 100 MB?"), not 413."""
    return InvalidArgument(f"file: the upload is larger than the limit of {limit} bytes; send a smaller file")


def check_size(settings: Settings, size: int) -> None:
    limit = settings.api.max_upload_bytes
    if size > limit:
        raise too_large(limit)


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


def over_owner_quota(cap: int, used: int, size: int) -> InvalidArgument:
    return InvalidArgument(
        f"file: {size} bytes do not fit: your files already take {used} of the {cap} bytes allowed per "
        "owner; delete files you no longer need, or ask your administrator to raise "
        "limits.data_file_bytes_per_owner"
    )


async def check_owner_room(
    s: AsyncSession, settings: Settings, caller: Caller, size: int, *, replacing: str | None = None
) -> None:
    """`InvalidArgument` (400, as an upload over `api.max_upload_bytes`) when `size` more bytes would
    take the caller's owner's data files past `limits.data_file_bytes_per_owner` (0: no cap); the
    file `replacing` names does not count, its new contents (`size`) do. Data files' contents live
    in the shared database, so one owner must not fill its disk for every other owner.

    Called in the transaction that then writes, so a refusal writes nothing. It reads the owner's
    total without locking the owner's other files: uploads of one owner that run at the same time
    each see the total without the others, so together they may overshoot the cap by at most the
    uploads in flight at once (each at most `api.max_upload_bytes`)."""
    cap = settings.limits.data_file_bytes_per_owner
    if cap == 0:
        return
    query = select(func.coalesce(func.sum(DataFileRow.size), 0)).where(DataFileRow.owner == caller.owner)
    if replacing is not None:
        query = query.where(DataFileRow.id != replacing)
    used = int(await s.scalar(query) or 0)
    if used + size > cap:
        raise over_owner_quota(cap, used, size)


async def owned_file(s: AsyncSession, caller: Caller, file_id: str, *, lock: bool = False) -> DataFileRow:
    """The caller's file: 404 when missing, 403 when another owner's (`owners.check_owner`).
    `lock` holds the row for an update."""
    if not limits.can_be_id(file_id):
        raise owners.not_found("file", file_id)
    file = await s.get(DataFileRow, file_id, with_for_update=True if lock else None)
    return owners.check_owner(file, caller, "file", file_id)


async def _checked_size(services: Services, contents: Path, fmt: FileFormat) -> int:
    size = contents.stat().st_size
    check_size(services.settings, size)
    await asyncio.to_thread(validate_contents, contents, fmt)
    return size


async def create_file(
    services: Services, caller: Caller, *, contents: Path, format: str, name: str | None = None
) -> DataFileRow:
    caller.require(CREATE_FILES)
    fmt = parse_format(format)
    limits.optional_segment_name("name", name, limits.FILE_NAME_CHARS)
    size = await _checked_size(services, contents, fmt)
    file = DataFileRow(
        id=new_id(),
        owner=caller.owner,
        name=name,
        format=fmt.value,
        revision=1,
        size=size,
        date_created=utcnow(),
    )
    async with services.db.session() as s:
        await check_owner_room(s, services.settings, caller, size)
        s.add(file)
        await s.flush()
        await file_contents.write(s, file.id, contents)
    log.info("file created", extra={"file_id": file.id, "format": fmt.value, "size": size})
    return file


async def list_files(services: Services, caller: Caller) -> list[DataFileRow]:
    caller.require(READ_FILES)
    query = (
        select(DataFileRow)
        .where(DataFileRow.owner == caller.owner)
        .order_by(DataFileRow.date_created, DataFileRow.id)
    )
    async with services.db.session() as s:
        return list((await s.scalars(query)).all())


async def get_file(services: Services, caller: Caller, file_id: str) -> DataFileRow:
    caller.require(READ_FILES)
    async with services.db.session() as s:
        return await owned_file(s, caller, file_id)


async def open_contents(
    services: Services, caller: Caller, file_id: str
) -> tuple[DataFileRow, AsyncIterator[bytes]]:
    """The file and its bytes in chunks of at most 1 MiB, never held whole. The first chunk is read
    here, so a failure is raised before an answer starts."""
    caller.require(READ_FILES)
    async with services.db.session() as s:
        file = await owned_file(s, caller, file_id)
        first = await file_contents.first_chunk(s, file.id)
    chunks = await file_contents.stream(services, services.store, file, first)
    return file, chunks


async def replace_contents(
    services: Services, caller: Caller, file_id: str, *, contents: Path
) -> DataFileRow:
    """The new contents and the new revision in one transaction: a reader sees the old or the new."""
    caller.require(UPDATE_FILES)
    async with services.db.session() as s:
        file = await owned_file(s, caller, file_id)
    size = await _checked_size(services, contents, FileFormat(file.format))
    async with services.db.session() as s:
        file = await owned_file(s, caller, file_id, lock=True)
        await check_owner_room(s, services.settings, caller, size, replacing=file.id)
        was_in_store = await file_contents.in_store(s, file.id)
        await file_contents.write(s, file.id, contents)
        file.size = size
        file.revision += 1
    if was_in_store:
        await asyncio.shield(file_contents.remove_from_store(services, file_id))
    log.info("file contents replaced", extra={"file_id": file.id, "revision": file.revision})
    return file


async def delete_file(services: Services, caller: Caller, file_id: str) -> None:
    """Delete the file and, in the same transaction, remove it from every corpus and engine corpus
    of the owner that names it, with the pretranslations and word alignments read from them
    (`file_references`), as Serval's `DataFileDeleter` and its `DataFileDeleted` handlers do, and
    its contents with it (no model store needed). Builds already started keep their exported
    copies (`builds/{id}/`)."""
    caller.require(DELETE_FILES)
    async with services.db.session() as s:
        file = await owned_file(s, caller, file_id, lock=True)
        await remove_file_everywhere(s, caller.owner, file_id)
        was_in_store = await file_contents.in_store(s, file_id)
        await file_contents.delete_chunks(s, file_id)
        await s.delete(file)
    if was_in_store:
        await asyncio.shield(file_contents.remove_from_store(services, file_id))
    log.info("file deleted", extra={"file_id": file_id})
