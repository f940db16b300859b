"""Starting a build: `start_build` is a pipeline of named steps. Check the request, refuse early
what the database already rules out, check the options and the base model they name, check the
model store, plan the export, record the Pending build, then write its files and launch its job.
Everything up to the record refuses the request (4xx/503, nothing made); a failure after it
faults the build instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import UPDATE_ENGINES, Caller
from serval_api.builds.launcher import JobSpec, LaunchRefused
from serval_api.db.models import Build, BuildState, Engine, EngineType, utcnow
from serval_api.errors import Conflict, InvalidArgument, ServalError, Unavailable
from serval_api.service import (
    build_corpora,
    build_model,
    build_segments,
    corpus_export,
    corpus_files,
    limits,
    revisions,
)
from serval_api.service.build_corpora import PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.build_transitions import fault_build, record_job_ref, webhook_wakeup
from serval_api.service.builds import running_build
from serval_api.service.changes import engine_key, owner_builds_key
from serval_api.service.context import Services
from serval_api.service.deployment import service_version
from serval_api.service.engines import TRANSLATION_TYPES, owned_engine
from serval_api.service.keys import hash_secret, new_id
from serval_api.service.status import STORE_PROBE_KEY
from serval_api.webhooks.outbox import enqueue_build_events
from serval_common.build_options import BuildOptions, BuildOptionsError, JobOptions
from serval_common.families import family
from serval_common.manifest import ManifestError, base_model_folder, read_manifest, store_unavailable
from serval_common.names import InvalidName
from serval_common.redact import error_reference, redact, secret_values
from serval_common.store import InvalidKey

log = logging.getLogger(__name__)


async def start_build(
    services: Services,
    caller: Caller,
    engine_id: str,
    *,
    name: str | None = None,
    train_on: list[TrainingEntry] | None = None,
    pretranslate: list[PretranslateEntry] | None = None,
    options: dict[str, Any] | None = None,
    build_id: str | None = None,
    catalog: list[corpus_files.ParallelSource] | None = None,
    word_align_on: list[WordAlignEntry] | None = None,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
    model: str | None = None,
) -> Build:
    """Omitted `train_on` trains on all the engine's parallel corpora and engine corpora (none:
    inference-only); empty `train_on` is an inference-only build. `catalog` (gRPC) holds the corpora
    the request carries, which the entries then name instead of the engine's stored ones.
    `word_align_on` (a word-alignment engine's build, `types` the word-alignment types) takes the
    place of `pretranslate`: omitted, every parallel corpus is aligned; empty, none. `model`
    (Serval 1.20's) names the base model to start from, as `options.baseModel` does."""
    caller.require(UPDATE_ENGINES)
    _check_request(services, name, build_id, train_on, pretranslate, word_align_on)
    engine_type = await _refuse_early(services, caller, engine_id, build_id, types)
    await services.quotas.build_start(caller)
    options = build_model.with_model(engine_type, model, options)
    parsed = await _checked_options(services, engine_type, options, model)
    await _check_store(services)
    plan = await corpus_export.plan_build(
        services,
        caller,
        engine_id,
        train_on=train_on,
        pretranslate=pretranslate,
        catalog=catalog,
        word_align_on=word_align_on,
        types=types,
    )
    build, spec = await _record_build(
        services,
        caller,
        engine_id,
        build_id,
        name=name,
        options=options,
        parsed=parsed,
        plan=plan,
        types=types,
    )
    await _write_and_launch(services, build, plan, spec)
    return build


def _check_request(
    services: Services,
    name: str | None,
    build_id: str | None,
    train_on: list[TrainingEntry] | None,
    pretranslate: list[PretranslateEntry] | None,
    word_align_on: list[WordAlignEntry] | None,
) -> None:
    """The request's own limits: its name, its build id, and its corpus entries."""
    limits.optional_text("name", name, limits.NAME_CHARS)
    if build_id is not None:
        limits.new_id("buildId", build_id)
    max_items = services.settings.api.max_list_items
    build_corpora.check("trainOn", train_on, max_items)
    build_corpora.check("pretranslate", pretranslate, max_items)
    build_corpora.check("wordAlignOn", word_align_on, max_items)


async def _refuse_early(
    services: Services, caller: Caller, engine_id: str, build_id: str | None, types: frozenset[EngineType]
) -> str:
    """Cheap refusals before the plan reads (and downloads) every corpus; the transaction of
    `_record_build` checks again and is what counts. The engine's type."""
    async with services.db.session() as s:
        engine_type = (await owned_engine(s, caller, engine_id, types=types)).type
        await _refuse_duplicate(s, engine_id, build_id)
    return engine_type


async def _refuse_duplicate(s: AsyncSession, engine_id: str, build_id: str | None) -> None:
    if await running_build(s, engine_id) is not None:
        raise Conflict(f"engine {engine_id} already has a build pending or running")
    if build_id is not None and await s.get(Build, build_id) is not None:
        raise Conflict(f"build {build_id} already exists")


async def _checked_options(
    services: Services, engine_type: str, options: dict[str, Any] | None, model: str | None
) -> JobOptions:
    """The build's options parsed for its engine type, and the base model they name checked."""
    parsed = _check_options(engine_type, options)
    if isinstance(parsed, BuildOptions) and parsed.base_model is not None:
        await _check_base_model(
            services, parsed.base_model, "model" if model is not None else "options.baseModel"
        )
    return parsed


async def _record_build(
    services: Services,
    caller: Caller,
    engine_id: str,
    build_id: str | None,
    *,
    name: str | None,
    options: dict[str, Any] | None,
    parsed: JobOptions,
    plan: build_segments.ExportPlan,
    types: frozenset[EngineType],
) -> tuple[Build, JobSpec]:
    """The Pending build, recorded with its engine marked building and its webhook events queued,
    and announced; its job's spec."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    try:
        async with services.db.session() as s:
            engine = await owned_engine(s, caller, engine_id, lock=True, types=types)
            await _refuse_duplicate(s, engine_id, build_id)
            build = Build(
                id=build_id or new_id(),
                engine_id=engine_id,
                owner=caller.owner,
                revision=1,
                name=name,
                state=BuildState.PENDING.value,
                step=0,
                train_on=build_corpora.dump(plan.train_on),
                pretranslate=build_corpora.dump(
                    plan.pretranslate if plan.word_align_rows is None else plan.word_align_on
                ),
                options=options,
                target_model_revision=revisions.take_revision(engine),
                job_token_hash=hash_secret(token),
                date_created=now,
                execution_data=plan.execution_data(engine, _model_name(services, parsed)),
                train_segments_through=plan.train_segments_through,
                deployment_version=service_version(),
            )
            engine.is_building = True
            s.add(build)
            hooked = await enqueue_build_events(
                s, build, was_running=True, was_started=False, base_url=services.settings.api_base_url
            )
            spec = job_spec(services, build, engine, train=plan.train, job_token=token)
    except IntegrityError:
        raise Conflict(f"engine {engine_id} already has a build pending or running") from None
    services.changes.notify(engine_key(engine_id), owner_builds_key(build.owner), *webhook_wakeup(hooked))
    log.info("build created", extra={"engine_id": engine_id, "build_id": build.id})
    return build, spec


async def _write_and_launch(
    services: Services, build: Build, plan: build_segments.ExportPlan, spec: JobSpec
) -> None:
    """The build's files written and its job launched; a failure faults the build. The answer is
    the build as created, Pending at revision 1, whatever follows: a client long-polls for
    revision 2 on, which brings Active and the end, or a failed launch's Faulted."""
    extra = {"engine_id": build.engine_id, "build_id": build.id}
    try:
        await corpus_export.write_build_files(services, build.id, plan)
        await record_job_ref(services, build.id, await services.launcher.launch(spec))
    except (ServalError, LaunchRefused) as e:
        log.warning("build job launch refused", extra={**extra, "error": str(e)})
        shown = redact(str(e), secret_values(services.settings))
        await fault_build(services, build.id, f"the build job could not be launched: {shown}")
    except Exception as e:
        message = error_reference("the build job could not be launched", e, log, extra)
        await fault_build(services, build.id, message)


def job_spec(services: Services, build: Build, engine: Engine, *, train: bool, job_token: str) -> JobSpec:
    return JobSpec(
        build_id=build.id,
        engine_id=engine.id,
        source_language=engine.source_code,
        target_language=engine.target_code,
        revision=build.target_model_revision,
        train=train,
        options_json=json.dumps(build.options) if build.options else "{}",
        store_url=services.settings.resolved_store_url,
        api_address=services.settings.api_grpc_address,
        job_token=job_token,
        engine_type=engine.type,
    )


def _check_options(engine_type: str, options: dict[str, Any] | None) -> JobOptions:
    """Refuse bad build options now (400) rather than fault the build minutes later."""
    try:
        return family(engine_type).options.parse(json.dumps(options or {}))
    except BuildOptionsError as e:
        raise InvalidArgument(str(e)) from None
    except RecursionError:
        raise InvalidArgument("options: nested too deeply") from None


async def _check_store(services: Services) -> None:
    """The build's export goes to the model store once the build is recorded, and its job reads it
    from there: a store that is down refuses the build now, before anything is made (503, as every
    outage). The corpora themselves are read from the database."""
    await asyncio.to_thread(services.store.exists, STORE_PROBE_KEY)


def _model_name(services: Services, options: JobOptions) -> str | None:
    """The base model a build starts from (its `baseModel`, or the default); None for an engine
    type without base models."""
    if not isinstance(options, BuildOptions):
        return None
    return options.base_model or services.settings.jobs.default_base_model


async def _check_base_model(services: Services, name: str, field: str = "options.baseModel") -> None:
    """A build starts only from a base model an administrator published (`serval admin
    base-model …` writes `base-models/{name}/manifest.json`, last): 400 for any other name, naming
    the published ones, before anything is recorded or queued."""
    try:
        await _read_base_model(services, name)
    except InvalidArgument:
        hint = build_model.published_hint(await build_model.published_base_models(services))
        raise InvalidArgument(
            f"{field}: {limits.shown(name)} is not a published base model; {hint}"
        ) from None


async def _read_base_model(services: Services, name: str) -> None:
    refused = InvalidArgument(f"{limits.shown(name)} is not a published base model")
    try:
        manifest = await asyncio.to_thread(read_manifest, services.store, base_model_folder(name))
    except (InvalidName, InvalidKey):
        raise refused from None
    except ManifestError as e:
        if store_unavailable(e):
            log.warning("model store unavailable at build start", extra={"base_model": name, "error": str(e)})
            raise Unavailable("the model store is unavailable; try again later", retry_after_s=5) from None
        log.info("build refused: base model not published", extra={"base_model": name, "error": str(e)})
        raise refused from None
    if manifest.kind != "base-model":
        raise refused
