from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import ModelDownloadUrl
from serval_api.service import Services, downloads

router = APIRouter(prefix="/api/v1", tags=["Translation Engines"])


@router.get(
    "/translation/engines/{engine_id}/model-download-url",
    response_model=ModelDownloadUrl,
)
async def model_download_url(engine_id: str, services: ServicesDep, caller: CallerDep) -> ModelDownloadUrl:
    url = await downloads.model_download_url(services, caller, engine_id)
    return ModelDownloadUrl(url=url.url, model_revision=url.model_revision, expires_at=url.expires_at)


@router.get(
    "/model-downloads/{token}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A gzipped tar of the model revision: manifest.json and the model files",
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        },
        **errors(403, 404),
    },
)
async def model_download(token: str, services: ServicesDep) -> StreamingResponse:
    """The URL `model-download-url` answers; the token in it is the credential."""
    grant = downloads.verify(services.settings, token)
    archive = await services.store_call(downloads.open_archive, services.settings, grant)
    name = f"{grant.engine_id}-{grant.revision}.tar.gz"
    return StreamingResponse(
        _on_store_threads(services, archive),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


async def _on_store_threads(services: Services, chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """The archive's pieces, each read from the store (and gzipped) on the store's own threads
    (`Services.store_call`): a store that hangs mid-download holds one of those, not the thread
    pool every other blocking call of the service shares."""
    while (chunk := await services.store_call(next, chunks, None)) is not None:
        yield chunk
