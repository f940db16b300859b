"""Model backends behind one registry, keyed by the manifest's `backend` name."""

from __future__ import annotations

from inference_gpu.families.nmt.backends.base import Backend, Hypothesis, TranslateRequest
from inference_gpu.families.nmt.backends.ctranslate2 import CTranslate2Backend

BACKENDS: dict[str, type[Backend]] = {CTranslate2Backend.name: CTranslate2Backend}


def backend_class(name: str) -> type[Backend]:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None


__all__ = ["BACKENDS", "Backend", "Hypothesis", "TranslateRequest", "backend_class"]
