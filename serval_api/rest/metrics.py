from __future__ import annotations

from fastapi import APIRouter, Request, Response

from serval_api.metrics import CONTENT_TYPE_LATEST, ApiMetrics

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition, unauthenticated (`api.metrics_enabled` turns it off)."""
    registry: ApiMetrics = request.app.state.metrics
    return Response(await registry.scrape(), media_type=CONTENT_TYPE_LATEST)
