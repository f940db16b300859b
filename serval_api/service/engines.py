"""Translation engines: create, read, update languages, delete."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import CREATE_ENGINES, DELETE_ENGINES, READ_ENGINES, UPDATE_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, BuildRow, EngineRow, EngineType, utcnow
from serval_api.errors import Conflict, InvalidArgument, NotFound, NotSupported
from serval_api.service import limits
from serval_api.service.changes import build_key, engine_key, owner_builds_key
from serval_api.service.context import Services
from serval_api.service.keys import new_id
from serval_api.service.owners import check_owner
from serval_common import families
from serval_common.languages import LanguageInfo, resolve_language
from serval_common.model_revision import engine_models_prefix

log = logging.getLogger(__name__)


def parse_engine_type(value: str, allowed: frozenset[EngineType] = TRANSLATION_TYPES) -> EngineType:
    """Accepts any spelling of an engine type (`families.of_spelling`: REST's kebab-case, gRPC's
    PascalCase). An engine type of the other kind (a word-alignment type for a translation engine,
    or the reverse) is known but not served by this API (405); anything else is not an engine type
    (400)."""
    names = ", ".join(t.value for t in sorted(allowed))
    family = families.of_spelling(value)
    if family is None:
        raise InvalidArgument(f"unsupported engine type {limits.shown(value)}; expected one of: {names}")
    engine_type = EngineType(family.name)
    if engine_type not in allowed:
        kind = family.kind.value
        raise NotSupported(f"{engine_type.value!r} is a {kind} engine type; here use one of: {names}")
    return engine_type


def language(field_name: str, tag: str) -> LanguageInfo:
    """A BCP-47 tag, resolved; tags longer than the stored ones are refused before parsing."""
    limits.text(field_name, tag, limits.LANGUAGE_TAG_CHARS)
    try:
        info = resolve_language(tag)
    except ValueError as e:
        raise InvalidArgument(f"{field_name}: {e}") from None
    if len(info.tag) > limits.LANGUAGE_TAG_CHARS:
        raise InvalidArgument(
            f"{field_name}: {limits.shown(info.tag)} is longer than {limits.LANGUAGE_TAG_CHARS}"
        )
    return info


async def create_engine(
    services: Services,
    caller: Caller,
    *,
    engine_type: str,
    source_language: str,
    target_language: str,
    name: str | None = None,
    is_model_persisted: bool | None = None,
    engine_id: str | None = None,
    allowed: frozenset[EngineType] = TRANSLATION_TYPES,
) -> EngineRow:
    caller.require(CREATE_ENGINES)
    parsed = parse_engine_type(engine_type, allowed)
    source = language("sourceLanguage", source_language)
    target = language("targetLanguage", target_language)
    limits.optional_text("name", name, limits.NAME_CHARS)
    if engine_id is not None:
        limits.new_id("engineId", engine_id)
    if is_model_persisted is None and parsed.family.persisted_by_default:
        is_model_persisted = True
    engine = EngineRow(
        id=engine_id or new_id(),
        owner=caller.owner,
        name=name,
        type=parsed.value,
        source_language=source.tag,
        target_language=target.tag,
        source_code=source.code,
        target_code=target.code,
        is_model_persisted=is_model_persisted,
        is_building=False,
        model_revision=0,
        confidence=0.0,
        corpus_size=0,
        date_created=utcnow(),
    )
    async with services.db.session() as s:
        if engine_id is not None and await s.get(EngineRow, engine_id) is not None:
            raise Conflict(f"engine {engine_id} already exists")
        s.add(engine)
    log.info("engine created", extra={"engine_id": engine.id, "engine_type": engine.type})
    return engine


async def owned_engine(
    s: AsyncSession,
    caller: Caller,
    engine_id: str,
    *,
    lock: bool = False,
    types: frozenset[EngineType] = TRANSLATION_TYPES,
) -> EngineRow:
    """The caller's engine (`visible_engine`: 404 when missing, 403 when another owner's). `lock`
    holds the engine's row until the transaction ends; whatever changes an engine or its builds
    locks the engine first. `types` is the API's kind: a word-alignment engine is not found under
    `/translation/engines`, and the reverse."""
    if not limits.can_be_id(engine_id):
        raise NotFound(f"engine {limits.shown(engine_id)} not found")
    return visible_engine(
        await s.get(EngineRow, engine_id, with_for_update=True if lock else None), caller, engine_id, types
    )


def visible_engine(
    engine: EngineRow | None, caller: Caller, engine_id: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> EngineRow:
    """`engine` when the caller owns it and it is of `types`. Missing (or of the other API's kind)
    answers 404; another owner's 403, as Serval's `CheckOwnerAsync` does: ids are random, so the
    answer tells a stranger nothing it can use. Everything under an engine (builds, corpora,
    pretranslations, translate…) is reached through this check."""
    if engine is not None and engine.type not in types:
        engine = None
    return check_owner(engine, caller, "engine", engine_id)


async def get_engine(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> EngineRow:
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        return await owned_engine(s, caller, engine_id, types=types)


async def list_engines(
    services: Services, caller: Caller, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> list[EngineRow]:
    caller.require(READ_ENGINES)
    query = (
        select(EngineRow)
        .where(EngineRow.owner == caller.owner, EngineRow.type.in_([t.value for t in types]))
        .order_by(EngineRow.date_created, EngineRow.id)
    )
    async with services.db.session() as s:
        return list((await s.scalars(query)).all())


async def update_engine_languages(
    services: Services,
    caller: Caller,
    engine_id: str,
    *,
    source_language: str | None = None,
    target_language: str | None = None,
) -> EngineRow:
    """A language change invalidates nothing already built: the next build uses the new codes."""
    caller.require(UPDATE_ENGINES)
    source = language("sourceLanguage", source_language) if source_language is not None else None
    target = language("targetLanguage", target_language) if target_language is not None else None
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, lock=True)
        if engine.is_building:
            raise Conflict("cannot change the languages of an engine while it is building")
        if source is not None:
            engine.source_language, engine.source_code = source.tag, source.code
        if target is not None:
            engine.target_language, engine.target_code = target.tag, target.code
    services.changes.notify(engine_key(engine_id))
    log.info("engine languages updated", extra={"engine_id": engine_id})
    return engine


async def delete_engine(
    services: Services, caller: Caller, engine_id: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> None:
    """The engine goes at once (its builds, corpora, train segments and pretranslations with it,
    by cascade); then its running build is canceled, every node unloads it, and once both are done
    its model revisions (`models/{engineId}/`) and its builds' files (`builds/{buildId}/`) leave the
    model store. That clean-up finishes even if the caller hangs up."""
    caller.require(DELETE_ENGINES)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, lock=True, types=types)
        all_builds = (await s.scalars(select(BuildRow).where(BuildRow.engine_id == engine_id))).all()
        build_ids = [build.id for build in all_builds]
        running = [build.id for build in all_builds if build.build_state.is_running]
        for build in all_builds:
            await s.delete(build)
        await s.delete(engine)
    services.changes.notify(
        engine_key(engine_id), owner_builds_key(caller.owner), *(build_key(b) for b in build_ids)
    )
    log.info("engine deleted", extra={"engine_id": engine_id, "builds": len(build_ids)})
    await asyncio.shield(_release(services, engine_id, build_ids, running))


async def _release(services: Services, engine_id: str, build_ids: list[str], running: list[str]) -> None:
    """Stop what may still read or write the engine's store objects, then delete them."""
    settings = services.settings
    wait_s = settings.api.request_timeout_s + settings.api.heartbeat_interval_s
    extra = {"engine_id": engine_id}
    for build_id in running:
        await services.launcher.cancel(build_id)
        if not await services.launcher.wait_stopped(build_id, wait_s):
            log.warning(
                "the deleted engine's build job did not stop in time", extra={**extra, "build_id": build_id}
            )
    await services.dispatcher.retire_engine(engine_id, wait_s)
    store = services.store
    prefixes = [engine_models_prefix(engine_id), *(f"builds/{build_id}" for build_id in build_ids)]
    try:
        for prefix in prefixes:
            await services.store_call(store.delete_prefix, prefix)
    except Exception:
        log.exception(
            "could not delete the deleted engine's store objects", extra={**extra, "prefixes": prefixes}
        )
        raise
    log.info("deleted engine's store objects removed", extra={**extra, "prefixes": len(prefixes)})
