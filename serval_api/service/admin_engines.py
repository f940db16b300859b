"""What the web console shows an administrator about engines and models, for callers with the
`admin` scope: every owner's engines with their current revision, last build and the API keys
bound to them; the base models published in the model store with the languages each knows; and
the engine names the node list shows beside the revisions a node holds.

It only reads (the database, the model store's manifests); `admin_console.py` holds the builds,
the counts and the overview's long poll.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, or_, select

from serval_api.auth import ADMIN, Caller
from serval_api.db.models import ApiKeyRow, BuildRow, EngineRow, utcnow
from serval_api.service.admin_console import BuildView, build_view
from serval_api.service.context import Services
from serval_api.service.text_translation import public_base_model
from serval_common.languages import describe_languages, knows_all_nllb_languages
from serval_common.manifest import MANIFEST, Manifest, ManifestError, read_manifest
from serval_common.model_revision import BASE_MODELS
from serval_common.names import base_model_name_problem
from serval_common.store import ModelStore

MAX_ENGINES = 500
"""Engines listed at most, newest first (the summary still counts them all)."""


@dataclass(frozen=True)
class BoundKeyView:
    """An active API key bound to an engine (its secret is never shown)."""

    id: str
    prefix: str
    owner: str
    name: str | None


@dataclass(frozen=True)
class EngineView:
    id: str
    owner: str
    name: str | None
    engine_type: str
    """The engine's family: `nmt`, `smt-transfer`, `echo`, …"""
    source_language: str
    target_language: str
    model_revision: int
    """The revision translations use; 0: never built."""
    is_building: bool
    date_created: datetime
    last_build: BuildView | None
    bound_keys: list[BoundKeyView]


@dataclass(frozen=True)
class BaseModelView:
    name: str
    languages: list[str]
    """The NLLB codes the model knows (its manifest's)."""
    languages_text: str
    """The same in words: "all 202 NLLB-200 languages", "eng_Latn and swh_Latn", …"""
    all_nllb_languages: bool
    size_bytes: int
    quantization: str | None
    created_at: datetime
    is_default: bool
    """Fine-tunes start from it when a build names no base model (`jobs.default_base_model`)."""
    is_public: bool
    """The SIL Converters and LibreTranslate dialects translate with it for keys bound to no engine."""


@dataclass(frozen=True)
class BaseModelProblem:
    """A folder under `base-models/` whose manifest cannot be read."""

    name: str
    problem: str


async def list_engines(services: Services, caller: Caller) -> list[EngineView]:
    """Every owner's engines, newest first (at most `MAX_ENGINES`), with the last build of each and
    the active keys bound to it."""
    caller.require(ADMIN)
    now = utcnow()
    async with services.db.session() as s:
        engines = list(
            (
                await s.execute(
                    select(EngineRow).order_by(EngineRow.date_created.desc(), EngineRow.id).limit(MAX_ENGINES)
                )
            ).scalars()
        )
        ids = [engine.id for engine in engines]
        newest = (
            select(BuildRow.engine_id, func.max(BuildRow.date_created).label("created"))
            .where(BuildRow.engine_id.in_(ids))
            .group_by(BuildRow.engine_id)
            .subquery()
        )
        builds = (
            await s.execute(
                select(BuildRow, EngineRow.type)
                .join(EngineRow, EngineRow.id == BuildRow.engine_id)
                .join(
                    newest,
                    and_(BuildRow.engine_id == newest.c.engine_id, BuildRow.date_created == newest.c.created),
                )
            )
        ).all()
        keys = (
            await s.execute(
                select(ApiKeyRow)
                .where(
                    ApiKeyRow.engine_id.in_(ids),
                    ApiKeyRow.revoked_at.is_(None),
                    or_(ApiKeyRow.expires_at.is_(None), ApiKeyRow.expires_at > now),
                )
                .order_by(ApiKeyRow.created_at, ApiKeyRow.id)
            )
        ).scalars()
        last: dict[str, BuildView] = {}
        for build, kind in builds:
            last[build.engine_id] = build_view(build, kind)
        bound: dict[str, list[BoundKeyView]] = {}
        for key in keys:
            assert key.engine_id is not None
            bound.setdefault(key.engine_id, []).append(BoundKeyView(key.id, key.prefix, key.owner, key.name))
    return [
        EngineView(
            id=engine.id,
            owner=engine.owner,
            name=engine.name,
            engine_type=engine.type,
            source_language=engine.source_language,
            target_language=engine.target_language,
            model_revision=engine.model_revision,
            is_building=engine.is_building,
            date_created=engine.date_created,
            last_build=last.get(engine.id),
            bound_keys=bound.get(engine.id, []),
        )
        for engine in engines
    ]


async def engine_names(services: Services, engine_ids: Collection[str]) -> dict[str, str]:
    """The names of those of `engine_ids` that have one (the node list shows them beside ids)."""
    wanted = sorted({engine_id for engine_id in engine_ids if engine_id})
    if not wanted:
        return {}
    async with services.db.session() as s:
        rows = (await s.execute(select(EngineRow.id, EngineRow.name).where(EngineRow.id.in_(wanted)))).all()
    return {engine_id: name for engine_id, name in rows if name}


async def list_base_models(
    services: Services, caller: Caller
) -> tuple[list[BaseModelView], list[BaseModelProblem]]:
    """The base models published in the model store (a folder with a manifest), by name, and the
    folders whose manifest is unreadable."""
    caller.require(ADMIN)
    default = services.settings.jobs.default_base_model
    public = public_base_model(services)
    found, problems = await services.store_call(_read_base_models, services.store)
    return (
        [
            BaseModelView(
                name=name,
                languages=list(manifest.languages),
                languages_text=describe_languages(manifest.languages, shown=len(manifest.languages)),
                all_nllb_languages=knows_all_nllb_languages(manifest.languages),
                size_bytes=manifest.size_bytes,
                quantization=manifest.quantization,
                created_at=manifest.created_at,
                is_default=name == default,
                is_public=name == public,
            )
            for name, manifest in found
        ],
        problems,
    )


def _read_base_models(store: ModelStore) -> tuple[list[tuple[str, Manifest]], list[BaseModelProblem]]:
    names = sorted(
        {
            parts[1]
            for key in store.list_keys(BASE_MODELS)
            if len(parts := key.split("/")) == 3
            and parts[2] == MANIFEST
            and base_model_name_problem(parts[1]) is None
        }
    )
    found: list[tuple[str, Manifest]] = []
    problems: list[BaseModelProblem] = []
    for name in names:
        try:
            found.append((name, read_manifest(store, f"{BASE_MODELS}/{name}")))
        except ManifestError as exc:
            problems.append(BaseModelProblem(name, str(exc)))
    return found, problems
