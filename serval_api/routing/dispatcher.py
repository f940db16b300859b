"""The dispatcher: the one face through which the service layer sends inference work to the
nodes (`serval_api.service.context.TranslationDispatcher`).

It holds three parts, each in its own module, and only passes calls on:

- `request_routing.RequestRouter`: picks a node for each translate, word graph or alignment and
  awaits its answer (least loaded first, retried once elsewhere, cancelled when the caller gives up);
- `placement.Placement`: which node loads which weights: loads on demand, spreading a hot model,
  the hot swap to a build's new revision (and the prefetch that makes a build's Completed read
  its writes), retiring a deleted engine;
- `train_fanout.TrainSegmentFanOut`: a confirmed pair sent to every node holding the engine's model
  (families that learn segments), nodes that miss it catching up through `learning.LearningSync`.
"""

from __future__ import annotations

from serval_api.routing.placement import Placement
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.request_routing import RequestRouter
from serval_api.routing.train_fanout import TrainSegmentFanOut
from serval_api.routing.work import AlignWork, Served, TrainSegmentWork, TranslateWork, WordGraphWork
from serval_common.core import TranslationResult, WordAlignmentResult, WordGraph
from serval_common.model_revision import ModelRevision
from serval_common.settings import Settings


class Dispatcher:
    def __init__(self, registry: NodeRegistry, settings: Settings) -> None:
        self.registry = registry
        self.placement = Placement(registry, settings)
        self.router = RequestRouter(registry, settings, self.placement)
        self.train_fanout = TrainSegmentFanOut(registry)

    # Routing a request to a node.

    def queue_size(self) -> int:
        """Requests waiting for a node slot or a model load."""
        return self.router.queue_size()

    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> Served[list[TranslationResult]]:
        return await self.router.translate(work, request_id=request_id, timeout_s=timeout_s)

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[WordGraph]:
        return await self.router.word_graph(work, request_id=request_id, timeout_s=timeout_s)

    async def align(
        self, work: AlignWork, *, request_id: str, timeout_s: float
    ) -> Served[WordAlignmentResult]:
        return await self.router.align(work, request_id=request_id, timeout_s=timeout_s)

    # Placement and the hot swap.

    def loading(self, model: ModelRevision) -> bool:
        return self.placement.loading(model)

    async def prefetch(self, engine_id: str, revision: int, timeout_s: float, weights: str = "") -> bool:
        return await self.placement.prefetch(engine_id, revision, timeout_s, weights)

    def revision_published(
        self, engine_id: str, revision: int, *, weights: str = "", prefetched: bool = False
    ) -> None:
        self.placement.revision_published(engine_id, revision, weights=weights, prefetched=prefetched)

    def revision_withdrawn(self, engine_id: str, revision: int) -> None:
        self.placement.revision_withdrawn(engine_id, revision)

    async def retire_engine(self, engine_id: str, timeout_s: float) -> bool:
        return await self.placement.retire_engine(engine_id, timeout_s)

    # Train-segment fan-out.

    async def train_segment(self, work: TrainSegmentWork, *, request_id: str, timeout_s: float) -> int:
        return await self.train_fanout.send(work, request_id=request_id, timeout_s=timeout_s)
