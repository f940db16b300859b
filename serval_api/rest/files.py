"""/files: multipart uploads streamed to a temporary file, never held whole in memory. An upload
over `api.max_upload_bytes` (100,000,000 bytes, Serval's `RequestSizeLimit`) answers 400, as
Serval's does (`files.too_large`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import tempfile
import unicodedata
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from serval_api.auth import Caller
from serval_api.errors import InvalidArgument
from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.files_protocol import DataFile, file_dto
from serval_api.service import Services, files
from serval_api.service.files import CONTENT_TYPES, FileFormat

router = APIRouter(prefix="/api/v1/files", tags=["Data Files"])

# Room for the multipart boundaries, part headers and the small `format` and `name` fields.
_FORM_OVERHEAD_BYTES = 64 << 10

_FILE_PART = {
    "type": "string",
    "format": "binary",
    "description": "The file's bytes: a UTF-8 text file with one segment (e.g. one verse) a line, "
    "or a Paratext project's backup zip.",
}


def _multipart_body(description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {
                "multipart/form-data": {
                    "schema": {"type": "object", "required": required, "properties": properties}
                }
            },
        }
    }


_UPLOAD_BODY = _multipart_body(
    "A multipart/form-data form with the part `file` (the file itself), the field `format` (`Text` "
    "or `Paratext`) and, optionally, the field `name`.",
    {
        "file": _FILE_PART,
        "format": {
            "type": "string",
            "enum": [f.value for f in FileFormat],
            "description": "`Text`: plain UTF-8 text, one segment a line (line N of a source pairs "
            "with line N of its target); `Paratext`: a zip of a Paratext project (Settings.xml and "
            "its USFM books), paired by verse.",
        },
        "name": {
            "type": "string",
            "description": "The file's name as listed; default: the file part's file name.",
        },
    },
    ["file", "format"],
)
_REPLACE_BODY = _multipart_body(
    "A multipart/form-data form with the part `file`: the new contents (the format and name stay).",
    {"file": _FILE_PART},
    ["file"],
)


class _Upload:
    def __init__(self, path: Path, fields: dict[str, str], filename: str | None) -> None:
        self.path = path
        self.fields = fields
        self.filename = filename


async def _limited(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise files.too_large(limit - _FORM_OVERHEAD_BYTES)
        yield chunk


@contextlib.asynccontextmanager
async def _receive(request: Request, max_bytes: int) -> AsyncIterator[_Upload]:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidArgument("expected a multipart/form-data body with the fields file, format and name")
    limit = max_bytes + _FORM_OVERHEAD_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise files.too_large(max_bytes)
    try:
        form = await MultiPartParser(
            request.headers, _limited(request, limit), max_files=1, max_fields=10
        ).parse()
    except MultiPartException as e:
        raise InvalidArgument(f"invalid multipart body: {e.message}") from None
    with tempfile.TemporaryDirectory(prefix="serval-upload-") as folder:
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise InvalidArgument("file: a file part is required")
            path = Path(folder) / "contents"
            await asyncio.to_thread(_copy, upload, path)
            fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
            yield _Upload(path, fields, upload.filename)
        finally:
            await form.close()


def _copy(upload: UploadFile, path: Path) -> None:
    upload.file.seek(0)
    with path.open("wb") as out:
        shutil.copyfileobj(upload.file, out, 1 << 20)


@router.get("", response_model=list[DataFile], response_model_exclude_none=True)
async def list_files(services: ServicesDep, caller: CallerDep) -> list[DataFile]:
    base = services.settings.api_base_url
    return [file_dto(base, f) for f in await files.list_files(services, caller)]


@router.post(
    "",
    summary="Upload a data file; without `name`, the uploaded file name is used",
    status_code=status.HTTP_201_CREATED,
    response_model=DataFile,
    response_model_exclude_none=True,
    openapi_extra=_UPLOAD_BODY,
)
async def create_file(
    request: Request, services: ServicesDep, caller: CallerDep, response: Response
) -> DataFile:
    async with _receive(request, services.settings.api.max_upload_bytes) as upload:
        if "format" not in upload.fields:
            raise InvalidArgument("format: required (Text or Paratext)")
        file = await files.create_file(
            services,
            caller,
            contents=upload.path,
            format=upload.fields["format"],
            name=upload.fields.get("name") or upload.filename or None,
        )
    dto = file_dto(services.settings.api_base_url, file)
    response.headers["Location"] = dto.url
    return dto


@router.get("/{file_id}", response_model=DataFile, response_model_exclude_none=True)
async def get_file(file_id: str, services: ServicesDep, caller: CallerDep) -> DataFile:
    return file_dto(services.settings.api_base_url, await files.get_file(services, caller, file_id))


_CONTENTS: dict[str, Any] = {
    "response_class": Response,
    "responses": {
        200: {
            "description": "The file's bytes",
            "content": {
                media_type: {"schema": {"type": "string", "format": "binary"}}
                for media_type in sorted({t.partition(";")[0] for t in CONTENT_TYPES.values()})
            },
        }
    },
}


@router.get("/{file_id}/contents", **_CONTENTS)
async def get_file_contents(file_id: str, services: ServicesDep, caller: CallerDep) -> Response:
    return await _contents(services, caller, file_id)


@router.post("/{file_id}/contents", summary="Download the file: Serval's client asks with POST", **_CONTENTS)
async def download_file(file_id: str, services: ServicesDep, caller: CallerDep) -> Response:
    return await _contents(services, caller, file_id)


async def _contents(services: Services, caller: Caller, file_id: str) -> Response:
    file, chunks = await files.open_contents(services, caller, file_id)
    headers = {"Content-Disposition": content_disposition(file.name or file.id)}
    return StreamingResponse(chunks, media_type=CONTENT_TYPES[FileFormat(file.format)], headers=headers)


# RFC 5987 attr-char beyond letters and digits, which `quote` never escapes.
_ATTR_CHARS = "!#$&+-.^_`|~"


def content_disposition(filename: str) -> str:
    """`attachment` with an ASCII `filename` for old clients and the exact name, percent-encoded
    UTF-8, in `filename*` (RFC 6266, RFC 5987): a header value must be Latin-1, a name need not be."""
    return f"attachment; filename=\"{_ascii_fallback(filename)}\"; filename*=UTF-8''{quote(filename, safe=_ATTR_CHARS)}"


def _ascii_fallback(filename: str) -> str:
    """Accents dropped (`Génesis` → `Genesis`), other non-ASCII runs, controls, quotes and
    backslashes as `_`; a name with nothing readable left is `download` with its extension."""
    decomposed = "".join(c for c in unicodedata.normalize("NFKD", filename) if not unicodedata.combining(c))
    fallback = re.sub(r'[^\x20-\x7e]+|["\\]', "_", decomposed)
    stem, dot, extension = fallback.rpartition(".")
    if not dot:
        stem, extension = extension, ""
    return fallback if re.search(r"[A-Za-z0-9]", stem) else f"download{dot}{extension}"


@router.patch(
    "/{file_id}", response_model=DataFile, response_model_exclude_none=True, openapi_extra=_REPLACE_BODY
)
async def update_file(file_id: str, request: Request, services: ServicesDep, caller: CallerDep) -> DataFile:
    """Replaces the contents (multipart `file`); the format and name stay."""
    async with _receive(request, services.settings.api.max_upload_bytes) as upload:
        file = await files.replace_contents(services, caller, file_id, contents=upload.path)
    return file_dto(services.settings.api_base_url, file)


@router.delete("/{file_id}", status_code=status.HTTP_200_OK)
async def delete_file(file_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await files.delete_file(services, caller, file_id)
