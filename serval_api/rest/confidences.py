"""`GET /translation/engines/{id}/parallel-corpora/{parallelCorpusId}/confidences`: Serval 1.20's
`GetAllPretranslationConfidences` (`service/confidences.py`)."""

from __future__ import annotations

from fastapi import APIRouter

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.openapi import errors
from serval_api.rest.wire import Model
from serval_api.service import confidences

router = APIRouter(prefix="/api/v1/translation/engines/{engine_id}", tags=["Translation Engines"])


class PretranslationConfidence(Model):
    source_refs: list[str]
    target_refs: list[str]
    confidence: float


@router.get(
    "/parallel-corpora/{parallel_corpus_id}/confidences",
    response_model=list[PretranslationConfidence],
    responses=errors(409),
)
async def list_confidences(
    engine_id: str, parallel_corpus_id: str, services: ServicesDep, caller: CallerDep
) -> list[PretranslationConfidence]:
    """How sure the model was of each pretranslation of the engine's current model for the
    parallel corpus, in source order: between 0 and 1, or -1 when the build job gave none."""
    rows = await confidences.list_confidences(services, caller, engine_id, parallel_corpus_id)
    return [
        PretranslationConfidence(
            source_refs=r.source_refs, target_refs=r.target_refs, confidence=r.confidence
        )
        for r in rows
    ]
