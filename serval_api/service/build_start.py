"""Starting a build: `start_build` is a pipeline of named steps. Check the request, refuse early
what the database already rules out, check the options and the base model they name, plan the
export, record the Pending build, then write its files and launch its job. Everything up to the
record refuses the request (4xx/503, nothing made); a failure after it faults the build instead.

A model store that cannot be reached refuses nothing: Serval reads no store at build start (its
build job does), so it accepts the build (201) and the build faults. Here too: the build is
recorded and faults at once, its message naming the model store and what to check
(`STORE_DOWN`), whether the base model could not be checked or the build's files not written.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import replace
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import UPDATE_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, BuildRow, BuildState, EngineRow, EngineType, utcnow
from serval_api.errors import Conflict, InvalidArgument, ServalError
from serval_api.service import (
    build_corpora,
    build_model,
    build_segments,
    corpus_export,
    corpus_files,
    diagnostics,
    limits,
    revisions,
)
from serval_api.service.build_corpora import PretranslateEntry, TrainingEntry, WordAlignEntry
from serval_api.service.build_transitions import (
    cancel_current_build,
    fault_build,
    record_job_ref,
    webhook_wakeup,
)
from serval_api.service.builds import running_build
from serval_api.service.changes import engine_key, owner_builds_key
from serval_api.service.context import Services
from serval_api.service.deployment import service_version
from serval_api.service.engines import owned_engine
from serval_api.service.keys import hash_secret, new_id
from serval_api.service.launcher import LaunchRefused
from serval_api.service.options_json import UNPARSABLE
from serval_api.webhooks.outbox import enqueue_build_events
from serval_common.build_options import (
    MICRO_BUILD_OPTION,
    BuildOptionsError,
    JobOptions,
    NmtBuildOptions,
    is_micro_build,
)
from serval_common.families import family
from serval_common.jobs import JobSpec
from serval_common.manifest import store_unavailable
from serval_common.redact import error_reference, redact, secret_values

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
    supersede: bool = True,
) -> BuildRow:
    """Omitted `train_on` trains on all the engine's parallel corpora and engine corpora (none:
    inference-only); empty `train_on` is an inference-only build. `catalog` (gRPC) holds the corpora
    the request carries, which the entries then name instead of the engine's stored ones.
    `word_align_on` (a word-alignment engine's build, `types` the word-alignment types) takes the
    place of `pretranslate`: omitted, every parallel corpus is aligned; empty, none. `model`
    (Serval 1.20's) names the base model to start from, as `options.baseModel` does. A running
    micro-build of the engine is canceled first unless `supersede` is false (a micro-build's own
    start): the owner's builds never wait for one (`micro_builds`)."""
    caller.require(UPDATE_ENGINES)
    _check_request(services, name, build_id, train_on, pretranslate, word_align_on)
    if supersede:
        if isinstance(options, dict) and MICRO_BUILD_OPTION in options:
            raise InvalidArgument(
                f"options.{MICRO_BUILD_OPTION} is set by the service on the micro-builds it starts; leave it out"
            )
        await _supersede_micro_build(services, caller, engine_id, types)
    engine_type = await _refuse_early(services, caller, engine_id, build_id, types)
    await services.quotas.build_start(caller)
    options = build_model.with_model(engine_type, model, options)
    parsed, store_down = await _checked_options_or_store_down(services, engine_type, options, model)
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
    plan = _noting_ignored_options(plan, engine_type, options)
    base_model = build_model.model_name(services, parsed)
    if store_down is None and base_model is not None and not plan.train and plan.word_align_rows is None:
        await build_model.check_inference_only_languages(services, caller, engine_id, types, base_model)
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
    if store_down is not None:
        await _fault_store_down(services, build, store_down, "the base model could not be checked")
    else:
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


async def _supersede_micro_build(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType]
) -> None:
    async with services.db.session() as s:
        await owned_engine(s, caller, engine_id, types=types)
        running = await running_build(s, engine_id)
    if running is not None and is_micro_build(running.options):
        log.info("micro-build superseded", extra={"engine_id": engine_id, "build_id": running.id})
        await cancel_current_build(services, caller, engine_id, types)


async def _refuse_duplicate(s: AsyncSession, engine_id: str, build_id: str | None) -> None:
    if await running_build(s, engine_id) is not None:
        raise Conflict(f"engine {engine_id} already has a build pending or running")
    if build_id is not None and await s.get(BuildRow, build_id) is not None:
        raise Conflict(f"build {build_id} already exists")


async def _checked_options(
    services: Services, engine_type: str, options: dict[str, Any] | None, model: str | None
) -> JobOptions:
    """The build's options parsed for its engine type, and the base model they name checked."""
    parsed = _check_options(engine_type, options)
    if isinstance(parsed, NmtBuildOptions) and parsed.base_model is not None:
        await build_model.check_base_model(
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
) -> tuple[BuildRow, JobSpec]:
    """The Pending build, recorded with its engine marked building and its webhook events queued,
    and announced; its job's spec."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    try:
        async with services.db.session() as s:
            engine = await owned_engine(s, caller, engine_id, lock=True, types=types)
            await _refuse_duplicate(s, engine_id, build_id)
            build = BuildRow(
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
                execution_data=plan.execution_data(engine, build_model.model_name(services, parsed)),
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
    services: Services, build: BuildRow, plan: build_segments.ExportPlan, spec: JobSpec
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
        if store_unavailable(e):
            await _fault_store_down(services, build, e, "the build's files could not be written")
            return
        message = error_reference("the build job could not be launched", e, log, extra)
        await fault_build(services, build.id, message)


def job_spec(
    services: Services, build: BuildRow, engine: EngineRow, *, train: bool, job_token: str
) -> JobSpec:
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
        raise InvalidArgument(f"options: {UNPARSABLE}: nested too deeply") from None


def _noting_ignored_options(
    plan: build_segments.ExportPlan, engine_type: str, options: dict[str, Any] | None
) -> build_segments.ExportPlan:
    """`plan` with a warning naming the options the engine type does not take, if any: the build
    keeps and passes them on, as Serval does, but nothing reads them."""
    ignored = family(engine_type).options.ignored_keys(options or {})
    if not ignored:
        return plan
    note = diagnostics.ignored_options(engine_type, ignored)
    return replace(plan, warnings=[*plan.warnings, note.message], diagnostics=[*plan.diagnostics, note])


STORE_DOWN = (
    "the model store could not be reached ({what}): check that the model store is up and that the "
    "API service reaches it at the address its settings give (store.url, store.s3_endpoint_url), "
    "then start the build again"
)
"""A build's message when the model store is down at its start; the error id that follows leads
to the log's full account (the store's URL and the error), which no client reads."""


async def _checked_options_or_store_down(
    services: Services, engine_type: str, options: dict[str, Any] | None, model: str | None
) -> tuple[JobOptions, Exception | None]:
    """`_checked_options`, and the store failure that kept the base model from being checked (the
    options then parsed alone): it faults the build once recorded rather than refuse it."""
    try:
        return await _checked_options(services, engine_type, options, model), None
    except build_model.StoreDown as e:
        return _check_options(engine_type, options), e.cause


async def _fault_store_down(services: Services, build: BuildRow, cause: Exception, what: str) -> None:
    """Fault `build`, started while the model store is down, with `STORE_DOWN`. Nothing of the build
    is in the store to discard (its job never ran), and a store that hangs would hold the answer
    once more for nothing: the store sweep removes whatever is left."""
    extra = {"engine_id": build.engine_id, "build_id": build.id}
    message = error_reference(STORE_DOWN.format(what=what), cause, log, extra)
    await fault_build(services, build.id, message, discard=False)
