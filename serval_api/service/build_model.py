"""Serval 1.20's `TranslationBuildConfig.model`: the model a build starts from, by name.

Here that is a base model an administrator published (`serval admin base-model …` writes
`base-models/{name}/`), the same choice as the build option `baseModel`: `model` becomes the
build's `options.baseModel`, and is checked as that is when the build starts (400 for a name that
is not a published base model, naming the ones that are).
"""

from __future__ import annotations

from typing import Any

from serval_api.errors import InvalidArgument
from serval_api.service import limits
from serval_api.service.context import Services
from serval_common.families import family
from serval_common.manifest import BASE_MODELS
from serval_common.names import base_model_name_problem

MAX_NAMES_SHOWN = 20


def with_model(engine_type: str, model: str | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """`options` with `model` as its `baseModel`; `options` as they are without a `model`."""
    if model is None:
        return options
    if "base_model" not in family(engine_type).options.model_fields:
        raise InvalidArgument(
            f"model: {engine_type} engines start from no base model (they train on their corpora); "
            "leave `model` out"
        )
    problem = base_model_name_problem(model)
    if problem is not None:
        raise InvalidArgument(
            f"model: {limits.shown(model)} is not a base model's name ({problem}); send the name of a "
            "base model an administrator published"
        )
    chosen = (options or {}).get("baseModel")
    if chosen is not None and chosen != model:
        raise InvalidArgument(
            f"model {limits.shown(model)} and options.baseModel {limits.shown(str(chosen))} name different "
            "base models; send one of them"
        )
    return {**(options or {}), "baseModel": model}


async def published_base_models(services: Services) -> list[str]:
    """The names of the published base models, sorted (those with a manifest)."""

    def names() -> list[str]:
        found = set()
        for key in services.store.list_keys(BASE_MODELS):
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == "manifest.json" and base_model_name_problem(parts[1]) is None:
                found.add(parts[1])
        return sorted(found)

    return await services.store_call(names)


def published_hint(names: list[str]) -> str:
    """What to send instead, for an error message."""
    if not names:
        return (
            "no base model is published yet; an administrator publishes them with `serval admin base-model`"
        )
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (", …" if len(names) > MAX_NAMES_SHOWN else "")
    return f"send one of the published base models: {shown}"
