"""The objects every service function needs, built once by `ApiService`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import ParamSpec, Protocol, TypeVar

from serval_api.db.database import Database
from serval_api.jwt_verifier import JwtVerifier
from serval_api.routing.fleet import Fleet
from serval_api.routing.work import AlignWork, Served, TrainSegmentWork, TranslateWork, WordGraphWork
from serval_api.service.changes import ChangeNotifier
from serval_api.service.launcher import JobLauncher
from serval_api.service.lookups import Lookups
from serval_api.service.quotas import Quotas
from serval_api.service.store_calls import SharedCheck, StoreCalls
from serval_common.core import TranslationResult, WordAlignmentResult, WordGraph
from serval_common.model_revision import ModelRevision
from serval_common.settings import Settings
from serval_common.store import ModelStore, store_from_settings

LONG_POLL_MAX_S = 40.0

P = ParamSpec("P")
T = TypeVar("T")


class TranslationDispatcher(Protocol):
    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> Served[list[TranslationResult]]: ...

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[WordGraph]: ...

    async def align(
        self, work: AlignWork, *, request_id: str, timeout_s: float
    ) -> Served[WordAlignmentResult]: ...

    def queue_size(self) -> int: ...

    def loading(self, model: ModelRevision) -> bool:
        """Whether a node is loading `model` (or its weights) now."""

    async def prefetch(self, engine_id: str, revision: int, timeout_s: float, weights: str = "") -> bool:
        """Before a build reads Completed: the nodes serving the engine load its new revision
        (serving `weights`, where known), waited for up to `timeout_s`; whether it is ready (or no
        node served the engine)."""

    def revision_withdrawn(self, engine_id: str, revision: int) -> None:
        """A prefetched revision whose build did not complete: nodes unload it."""

    def revision_published(
        self, engine_id: str, revision: int, *, weights: str = "", prefetched: bool = False
    ) -> None:
        """An engine's current model revision changed (it serves `weights`, where known): nodes
        may load it ahead of requests (unless `prefetched`: the build's completion already asked
        them)."""

    async def retire_engine(self, engine_id: str, timeout_s: float) -> bool:
        """The engine is gone: route nothing more to it, have every node unload its revisions once
        their work is done, and wait up to `timeout_s` for that. Whether every node did."""

    async def train_segment(self, work: TrainSegmentWork, *, request_id: str, timeout_s: float) -> int:
        """Every node holding a revision of the engine learns the pair; how many did."""


@dataclass
class Services:
    settings: Settings
    db: Database
    launcher: JobLauncher
    dispatcher: TranslationDispatcher
    changes: ChangeNotifier = field(default_factory=lambda: ChangeNotifier())
    fleet: Fleet | None = None
    """Admin control of the nodes connected to this replica; None where no node API runs."""
    long_poll_max_s: float = LONG_POLL_MAX_S
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the service starts to stop: long polls that would hold its shutdown (the web
    console's overview) answer at once."""

    @cached_property
    def store(self) -> ModelStore:
        """The model store the settings name, opened once (an S3 client is thread-safe and keeps
        its connections)."""
        return store_from_settings(self.settings)

    @cached_property
    def store_calls(self) -> StoreCalls:
        """The bounded pool the service's store calls run on (`store_calls.py`)."""
        return StoreCalls(self.settings.api.store_threads)

    async def store_call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)`, a blocking model-store call, on the store's own threads: never
        `asyncio.to_thread`, whose default executor a hung store would fill for everyone."""
        return await self.store_calls(fn, *args, **kwargs)

    @cached_property
    def store_health(self) -> SharedCheck:
        """The health check's store probe, shared and reused (`api.store_health_cache_s`)."""
        return SharedCheck(self.settings.api.store_health_cache_s)

    def close(self) -> None:
        """Release what the service's objects hold outside the event loop (the store's threads)."""
        if "store_calls" in self.__dict__:
            self.store_calls.close()

    @cached_property
    def lookups(self) -> Lookups:
        return Lookups(self.db, self.changes, self.settings.api.lookup_cache_s)

    @cached_property
    def quotas(self) -> Quotas:
        """The per-key limits every transport and dialect goes through."""
        return Quotas(self.db, self.settings.limits, replica=self.settings.api_instance_name)

    @cached_property
    def jwt(self) -> JwtVerifier:
        return JwtVerifier(self.settings.auth)
