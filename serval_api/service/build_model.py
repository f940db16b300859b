"""Serval 1.20's `TranslationBuildConfig.model`: the model a build starts from, by name.

Here that is a base model an administrator published (`serval admin base-model …` writes
`base-models/{name}/`), the same choice as the build option `baseModel`: `model` becomes the
build's `options.baseModel`, and is checked as that is when the build starts (400 for a name that
is not a published base model, naming the ones that are).

The checks a build's start makes of that base model live here too: it is published (a readable
`base-model` manifest), and an inference-only build's base model lists the engine's languages. A
model store that cannot be reached is `StoreDown`: the build is then recorded and faulted rather
than refused (`build_start`).
"""

from __future__ import annotations

import logging
from typing import Any

from serval_api.auth import Caller
from serval_api.db.models import EngineType
from serval_api.errors import InvalidArgument
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_common.build_options import JobOptions, NmtBuildOptions
from serval_common.families import family
from serval_common.languages import inference_only_refusal
from serval_common.manifest import (
    BASE_MODELS,
    ManifestError,
    base_model_folder,
    read_manifest,
    store_unavailable,
)
from serval_common.names import InvalidName, base_model_name_problem
from serval_common.store import InvalidKey

log = logging.getLogger(__name__)

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


class StoreDown(Exception):
    """The model store could not be reached while the build's options were checked."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def model_name(services: Services, options: JobOptions) -> str | None:
    """The base model a build starts from (its `baseModel`, or the default); None for an engine
    type without base models."""
    if not isinstance(options, NmtBuildOptions):
        return None
    return options.base_model or services.settings.jobs.default_base_model


async def check_base_model(services: Services, name: str, field: str = "options.baseModel") -> None:
    """A build starts only from a base model an administrator published (`serval admin
    base-model …` writes `base-models/{name}/manifest.json`, last): 400 for any other name, naming
    the published ones, before anything is recorded or queued."""
    try:
        await _read_base_model(services, name)
    except InvalidArgument:
        hint = published_hint(await published_base_models(services))
        raise InvalidArgument(
            f"{field}: {limits.shown(name)} is not a published base model; {hint}"
        ) from None


async def check_inference_only_languages(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType], base_model: str
) -> None:
    """An inference-only build serves its base model as it is: one whose manifest does not list the
    engine's languages is refused now (400, the sentence the build job would fault with), not
    after a job has run. A manifest that cannot be read leaves the job to say why."""
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, types=types)
        codes = (engine.source_code, engine.target_code)
    try:
        manifest = await services.store_call(read_manifest, services.store, base_model_folder(base_model))
    except (ManifestError, InvalidName, InvalidKey):
        return
    if manifest.kind != "base-model":
        return
    refusal = inference_only_refusal(base_model, manifest.languages, *codes)
    if refusal is not None:
        raise InvalidArgument(f"{refusal}.")


async def _read_base_model(services: Services, name: str) -> None:
    refused = InvalidArgument(f"{limits.shown(name)} is not a published base model")
    try:
        manifest = await services.store_call(read_manifest, services.store, base_model_folder(name))
    except (InvalidName, InvalidKey):
        raise refused from None
    except ManifestError as e:
        if store_unavailable(e):
            raise StoreDown(e) from e
        log.info("build refused: base model not published", extra={"base_model": name, "error": str(e)})
        raise refused from None
    if manifest.kind != "base-model":
        raise refused
