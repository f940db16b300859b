"""The engine families a node can serve: one `ServedModel` class per family, which the family
registry (`serval_common.families`) names with the manifest backend of its model folders.

A family whose packages are not installed (the `smt` extra for Thot) is not available: the node
does not claim it in Hello, so the API service never routes its engines here.
"""

from __future__ import annotations

import importlib
import logging

from inference_gpu.families.base import (
    BadInput,
    Capability,
    InputTooLong,
    ModelUnavailable,
    ServedModel,
    Unsupported,
    WorkFailure,
)
from serval_common import families
from serval_common.families import EngineFamily, UnknownFamily

log = logging.getLogger(__name__)


def _node_families() -> list[EngineFamily]:
    """The engine families nodes serve: those the registry gives a node model class."""
    return [f for f in families.families() if f.node_model is not None]


def _load_class(family: EngineFamily) -> type[ServedModel]:
    module, _, name = (family.node_model or "").partition(":")
    cls: type[ServedModel] = getattr(importlib.import_module(module), name)
    return cls


def model_class(backend: str) -> type[ServedModel]:
    """The class that loads model folders whose manifest names `backend`."""
    try:
        family = families.of_backend(backend)
    except UnknownFamily as exc:
        raise ModelUnavailable(str(exc)) from exc
    if family.node_model is None:
        raise ModelUnavailable(f"model backend {backend!r} is not served by nodes")
    return _load_class(family)


def available_families(wanted: list[str] | None = None) -> list[str]:
    """The families whose packages import here, limited to `wanted` when given (non-empty)."""
    names: list[str] = []
    for family in _node_families():
        if wanted and family.name not in wanted:
            continue
        try:
            _load_class(family)
        except ImportError as exc:
            log.info("engine family not available", extra={"family": family.name, "error": str(exc)})
            continue
        names.append(family.name)
    return names


__all__ = [
    "BadInput",
    "Capability",
    "InputTooLong",
    "ModelUnavailable",
    "ServedModel",
    "Unsupported",
    "WorkFailure",
    "available_families",
    "model_class",
]
