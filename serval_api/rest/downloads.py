from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.protocol import ModelDownloadUrl
from serval_api.service import downloads

router = APIRouter(prefix="/api/v1", tags=["Translation Engines"])


@router.get(
    "/translation/engines/{engine_id}/model-download-url",
    response_model=ModelDownloadUrl,
    responses=errors(405),
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
    archive = await asyncio.to_thread(downloads.open_archive, services.settings, grant)
    name = f"{grant.engine_id}-{grant.revision}.tar.gz"
    return StreamingResponse(
        archive,
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
