"""The REST routes translation and word-alignment engines share, each written once and added to a
kind's router by `add_engine_routes` / `add_build_routes`: the same service calls scoped to the
kind's engine types, answered in the kind's DTOs. What differs in its request body (creating an
engine, starting a build) stays in the kind's module and is handed in, so each router keeps
Serval's route order (and the OpenAPI document its order). `inference_route` and `served` are
the calls a loaded model answers (translate, align), on either kind.

No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations, which name
the kind's caller dependency, a value of the enclosing function."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import GenericAlias
from typing import Annotated, Any, Generic, Protocol, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.types import DecoratedCallable

from serval_api.auth import Caller
from serval_api.db.models import TRANSLATION_TYPES, WORD_ALIGNMENT_TYPES, BuildRow, EngineRow, EngineType
from serval_api.rest import protocol, word_alignment_protocol
from serval_api.rest.build_corpora import pretranslate_entries, training_entries
from serval_api.rest.deps import ServicesDep, get_caller, get_word_alignment_caller
from serval_api.rest.disconnect import while_connected
from serval_api.rest.openapi import errors
from serval_api.rest.word_alignment_protocol import word_align_entries
from serval_api.routing.work import Served
from serval_api.service import Services, build_start, build_transitions, builds, engines


class Located(Protocol):
    url: str


E = TypeVar("E", bound=Located)
B = TypeVar("B", bound=Located)

MinRevision = Annotated[int | None, Query(alias="min-revision", ge=0)]

NO_BUILD: dict[int | str, dict[str, Any]] = {204: {"description": "No build is pending or running"}}

Endpoint = Callable[..., Awaitable[Any]]
EngineConfig = protocol.TranslationEngineConfig | word_alignment_protocol.WordAlignmentEngineConfig


@dataclass(frozen=True)
class EngineKind(Generic[E, B]):
    """One kind of engine on REST: its engine types, the dependency that authenticates its
    callers, and its engine and build DTOs."""

    types: frozenset[EngineType]
    caller: Callable[..., Awaitable[Caller]]
    engine: type[E]
    engine_dto: Callable[[str, EngineRow], E]
    build: type[B]
    build_dto: Callable[[str, BuildRow], B]


TRANSLATION = EngineKind(
    TRANSLATION_TYPES,
    get_caller,
    protocol.TranslationEngine,
    protocol.engine_dto,
    protocol.TranslationBuild,
    protocol.build_dto,
)
WORD_ALIGNMENT = EngineKind(
    WORD_ALIGNMENT_TYPES,
    get_word_alignment_caller,
    word_alignment_protocol.WordAlignmentEngine,
    word_alignment_protocol.engine_dto,
    word_alignment_protocol.WordAlignmentBuild,
    word_alignment_protocol.build_dto,
)

L = TypeVar("L", bound=Located)
T = TypeVar("T")

MODEL_REVISION_HEADER = "X-Model-Revision"
"""Which model revision answered; during a hot swap it can be the one before `modelRevision`."""


def inference_route(
    router: APIRouter, path: str, response_model: Any
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """A POST a loaded model answers (translate, align, ...): 503 when no node can right now."""
    return router.post(
        path,
        response_model=response_model,
        response_model_exclude_none=True,
        responses=errors(405, 409, 413, 503),
    )


async def served(request: Request, response: Response, work: Awaitable[Served[T]]) -> T:
    """`work`'s answer, canceled if the client hangs up first, with the model revision that gave
    it as `X-Model-Revision`."""
    answer = await while_connected(request, work)
    response.headers[MODEL_REVISION_HEADER] = str(answer.revision)
    return answer.value


def list_of(model: type[Located]) -> GenericAlias:
    """`list[model]` for a model known only at run time (a listing's response model)."""
    return GenericAlias(list, (model,))


def created(dto: L, response: Response) -> L:
    """`dto`, the answer of a POST that created it, with its URL as `Location`."""
    response.headers["Location"] = dto.url
    return dto


async def create_engine(
    services: Services, caller: Caller, config: EngineConfig, response: Response, kind: EngineKind[E, B]
) -> E:
    engine = await engines.create_engine(
        services,
        caller,
        engine_type=config.type,
        source_language=config.source_language,
        target_language=config.target_language,
        name=config.name,
        is_model_persisted=config.is_model_persisted,
        allowed=kind.types,
    )
    return created(kind.engine_dto(services.settings.api_base_url, engine), response)


async def start_build(
    services: Services,
    caller: Caller,
    engine_id: str,
    response: Response,
    kind: EngineKind[E, B],
    config: protocol.TranslationBuildConfig | word_alignment_protocol.WordAlignmentBuildConfig,
) -> B:
    """What a build infers on is the config's: `pretranslate` (and a base `model`) for a
    translation engine, `word_align_on` for a word-alignment engine."""
    translation = config if isinstance(config, protocol.TranslationBuildConfig) else None
    alignment = config if isinstance(config, word_alignment_protocol.WordAlignmentBuildConfig) else None
    build = await build_start.start_build(
        services,
        caller,
        engine_id,
        name=config.name,
        train_on=training_entries(config.train_on),
        pretranslate=pretranslate_entries(translation.pretranslate) if translation is not None else None,
        word_align_on=word_align_entries(alignment.word_align_on) if alignment is not None else None,
        options=config.options,
        model=translation.model if translation is not None else None,
        types=kind.types,
    )
    return created(kind.build_dto(services.settings.api_base_url, build), response)


def add_engine_routes(
    router: APIRouter,
    kind: EngineKind[E, B],
    path: str,
    create: Endpoint,
    update: Endpoint | None = None,
) -> None:
    """List, create, get, update (where the kind has `update`) and delete the kind's engines at
    `path` and `path/{engine_id}`."""
    CallerOfKind = Annotated[Caller, Depends(kind.caller)]
    one = f"{path}/{{engine_id}}"

    @router.get(path, response_model=list_of(kind.engine), response_model_exclude_none=True)
    async def list_engines(services: ServicesDep, caller: CallerOfKind) -> list[E]:
        base = services.settings.api_base_url
        return [kind.engine_dto(base, e) for e in await engines.list_engines(services, caller, kind.types)]

    router.post(
        path,
        status_code=status.HTTP_201_CREATED,
        response_model=kind.engine,
        response_model_exclude_none=True,
        responses=errors(405, 409),
    )(create)

    @router.get(one, response_model=kind.engine, response_model_exclude_none=True)
    async def get_engine(engine_id: str, services: ServicesDep, caller: CallerOfKind) -> E:
        engine = await engines.get_engine(services, caller, engine_id, kind.types)
        return kind.engine_dto(services.settings.api_base_url, engine)

    if update is not None:
        router.patch(one, response_model=kind.engine, response_model_exclude_none=True)(update)

    @router.delete(one, status_code=status.HTTP_200_OK)
    async def delete_engine(engine_id: str, services: ServicesDep, caller: CallerOfKind) -> None:
        await engines.delete_engine(services, caller, engine_id, kind.types)


def add_build_routes(router: APIRouter, kind: EngineKind[E, B], start: Endpoint) -> None:
    """List, start (`start`, the kind's own), get, get the current and cancel the current build of
    an engine of the kind, on a router whose prefix names the engine."""
    CallerOfKind = Annotated[Caller, Depends(kind.caller)]

    @router.get("/builds", response_model=list_of(kind.build), response_model_exclude_none=True)
    async def list_builds(engine_id: str, services: ServicesDep, caller: CallerOfKind) -> list[B]:
        base = services.settings.api_base_url
        return [
            kind.build_dto(base, b) for b in await builds.list_builds(services, caller, engine_id, kind.types)
        ]

    router.post(
        "/builds",
        status_code=status.HTTP_201_CREATED,
        response_model=kind.build,
        response_model_exclude_none=True,
        responses=errors(409),
    )(start)

    @router.get(
        "/builds/{build_id}",
        response_model=kind.build,
        response_model_exclude_none=True,
        responses=errors(408),
    )
    async def get_build(
        engine_id: str,
        build_id: str,
        services: ServicesDep,
        caller: CallerOfKind,
        min_revision: MinRevision = None,
    ) -> B:
        build = await builds.get_build(
            services, caller, engine_id, build_id, min_revision=min_revision, types=kind.types
        )
        return kind.build_dto(services.settings.api_base_url, build)

    @router.get(
        "/current-build",
        response_model=kind.build,
        response_model_exclude_none=True,
        responses={**NO_BUILD, **errors(408)},
    )
    async def current_build(
        engine_id: str, services: ServicesDep, caller: CallerOfKind, min_revision: MinRevision = None
    ) -> B | Response:
        build = await builds.current_build(
            services, caller, engine_id, min_revision=min_revision, types=kind.types
        )
        if build is None:
            return Response(status_code=status.HTTP_204_NO_CONTENT)
        return kind.build_dto(services.settings.api_base_url, build)

    @router.post(
        "/current-build/cancel",
        response_model=kind.build,
        response_model_exclude_none=True,
        responses=NO_BUILD,
    )
    async def cancel_current_build(
        engine_id: str, services: ServicesDep, caller: CallerOfKind
    ) -> B | Response:
        build = await build_transitions.cancel_current_build(services, caller, engine_id, kind.types)
        if build is None:
            return Response(status_code=status.HTTP_204_NO_CONTENT)
        return kind.build_dto(services.settings.api_base_url, build)
