"""The engine families a node can serve, one `ServedModel` class per model-folder backend.

A family whose packages are not installed (the `smt` extra for Thot) is not available: the node
does not claim it in Hello, so the API service never routes its engines here.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

from inference_gpu.families.base import Capability, InputTooLong, ServedModel, Unsupported

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    name: str
    """Serval's engine type: `nmt`, `smt-transfer` or `statistical`."""
    backend: str
    """The manifest's `backend` of this family's model folders."""
    module: str
    class_name: str

    def model_class(self) -> type[ServedModel]:
        cls: type[ServedModel] = getattr(importlib.import_module(self.module), self.class_name)
        return cls


FAMILIES = [
    Family("nmt", "ctranslate2", "inference_gpu.families.nmt", "NmtModel"),
    Family("smt-transfer", "thot-smt", "inference_gpu.families.smt", "SmtModel"),
    Family("statistical", "thot-align", "inference_gpu.families.alignment", "AlignmentModel"),
]


def family_of_backend(backend: str) -> Family:
    for family in FAMILIES:
        if family.backend == backend:
            return family
    known = ", ".join(f.backend for f in FAMILIES)
    raise ValueError(f"unknown model backend {backend!r}; known: {known}")


def model_class(backend: str) -> type[ServedModel]:
    """The class that loads model folders whose manifest names `backend`."""
    return family_of_backend(backend).model_class()


def available_families(wanted: list[str] | None = None) -> list[str]:
    """The families whose packages import here, limited to `wanted` when given (non-empty)."""
    names: list[str] = []
    for family in FAMILIES:
        if wanted and family.name not in wanted:
            continue
        try:
            family.model_class()
        except ImportError as exc:
            log.info("engine family not available", extra={"family": family.name, "error": str(exc)})
            continue
        names.append(family.name)
    return names


__all__ = [
    "FAMILIES",
    "Capability",
    "Family",
    "InputTooLong",
    "ServedModel",
    "Unsupported",
    "available_families",
    "family_of_backend",
    "model_class",
]
