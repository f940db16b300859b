"""The objects every service function needs, built once by `ApiService`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from serval.translation.v1 import engine_pb2
from serval.word_alignment.v1 import engine_pb2 as alignment_pb2
from serval_api.builds.launcher import JobLauncher
from serval_api.db.database import Database
from serval_api.jwt_verifier import JwtVerifier
from serval_api.routing.fleet import Fleet
from serval_api.routing.work import AlignWork, Served, TrainSegmentWork, TranslateWork, WordGraphWork
from serval_api.service.changes import ChangeNotifier
from serval_api.service.lookups import Lookups
from serval_common.settings import Settings

LONG_POLL_MAX_S = 40.0


class TranslationDispatcher(Protocol):
    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> Served[list[engine_pb2.TranslationResult]]: ...

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[engine_pb2.WordGraph]: ...

    async def align(
        self, work: AlignWork, *, request_id: str, timeout_s: float
    ) -> Served[alignment_pb2.WordAlignmentResult]: ...

    def queue_size(self) -> int: ...

    def revision_published(self, engine_id: str, revision: int) -> None:
        """An engine's current model revision changed: nodes may load it ahead of requests."""

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

    @cached_property
    def lookups(self) -> Lookups:
        return Lookups(self.db, self.changes, self.settings.api.lookup_cache_s)

    @cached_property
    def jwt(self) -> JwtVerifier:
        return JwtVerifier(self.settings.auth)
