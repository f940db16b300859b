"""Data file contents as the database holds them (`data_file_chunks`), for tests that look at them
or turn a file into one uploaded before they existed (its contents in the model store)."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select

from serval_api.db.models import DataFileChunkRow
from serval_api.service.file_contents import contents_key
from tests.api.conftest import RunningApi


def chunk_count(api: RunningApi, file_id: str) -> int:
    services = api.service.services
    assert services is not None

    async def count() -> int:
        async with services.db.session() as s:
            query = (
                select(func.count()).select_from(DataFileChunkRow).where(DataFileChunkRow.file_id == file_id)
            )
            return int(await s.scalar(query) or 0)

    return api.run(count())


def set_chunks(api: RunningApi, file_id: str, *pieces: bytes) -> None:
    """Overwrite the file's contents in the database, behind the service's back."""
    services = api.service.services
    assert services is not None

    async def write() -> None:
        async with services.db.session() as s:
            await s.execute(delete(DataFileChunkRow).where(DataFileChunkRow.file_id == file_id))
            for seq, data in enumerate(pieces):
                await s.execute(insert(DataFileChunkRow).values(file_id=file_id, seq=seq, data=data))

    api.run(write())


def as_uploaded_before(api: RunningApi, file_id: str, contents: bytes) -> None:
    """The file as the code before `data_file_chunks` left it: its record, no chunk, and its
    contents in the model store at `files/{id}/contents`."""
    services = api.service.services
    assert services is not None
    services.store.write_bytes(contents_key(file_id), contents)
    set_chunks(api, file_id)
