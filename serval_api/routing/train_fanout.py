"""Train-segment fan-out (families that learn segments): a confirmed pair goes to every node
holding the engine's model.

The pair goes at once to every node of this replica holding a revision of the engine READY (never
to one loading it, which replays the pairs on completion, nor to one whose load failed); each pair
carries its number and the number before it, so no node applies it twice and a node that missed one
fetches the gap itself. Catching up is the node's own duty, from the database: every node reports
the number its model has learned up to, and any replica that finds the engine's last pair numbered
higher tells it to fetch the rest (`serval_api.routing.learning`), so a pair trained through any
replica, before a restart or while a node was away, reaches every node.

This stands apart from routing a request (`request_routing`): a request goes to one node and is
retried elsewhere, while a pair goes to every holder at once, is never retried, and a node that
misses it is left to catch up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from serval.inference.v1 import node_pb2
from serval_api.routing.deadline import answer_by, wall_clock
from serval_api.routing.held import READY
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeGone, NodeSession, model_ref
from serval_api.routing.work import TrainSegmentWork
from serval_common.model_revision import ModelRevision
from serval_common.redact import redact

log = logging.getLogger(__name__)


class TrainSegmentFanOut:
    def __init__(self, registry: NodeRegistry) -> None:
        self.registry = registry
        self.on_learning_missed: Callable[[str], None] | None = None
        """Called with the engine id when a node did not learn a pushed pair now (it catches up)."""

    async def send(self, work: TrainSegmentWork, *, request_id: str, timeout_s: float) -> int:
        """Send the pair to every node of this replica holding a revision of the engine READY, and
        wait for each within `timeout_s`; how many nodes learned it. The pair is stored first, and
        nothing is unloaded here: a node loading a revision replays it on completion, and a node
        that failed, did not answer in time, went away or is connected only to other replicas
        catches up from the database (`LearningSync`: each node reports the pair number its model
        has learned up to, and any replica tells it to fetch what it lacks)."""
        op = node_pb2.TrainSegmentOp(
            source_segment=work.source_segment,
            target_segment=work.target_segment,
            sentence_start=work.sentence_start,
            seq=work.seq,
            previous_seq=work.previous_seq,
        )
        sent: list[tuple[NodeSession, ModelRevision, str, asyncio.Future[node_pb2.WorkResult]]] = []
        deadline = time.monotonic() + timeout_s
        for session in self.registry.sessions():
            if work.family not in session.families:
                continue
            for key in session.held():
                if key.engine_id != work.model.engine_id or session.model_state(key.location) != READY:
                    continue
                through = session.trained_through(key.location)
                if through is not None and through >= work.seq:
                    continue  # caught up already
                item_id = f"{request_id}-{len(sent)}"
                item = node_pb2.WorkItem(
                    request_id=item_id, deadline=wall_clock(deadline), model=model_ref(key), train_segment=op
                )
                session.pushing[key.location] = max(work.seq, session.pushing.get(key.location, 0))
                sent.append((session, key, item_id, session.submit(item_id, item)))
        learned = 0
        for session, key, item_id, future in sent:
            extra = {"request_id": request_id, "node_id": session.node_id, "model": key.location}
            try:
                result = await answer_by(future, deadline)
            except NodeGone:
                reason = "the node went away"
            except TimeoutError:
                session.forget(item_id)
                reason = "did not answer in time"
            else:
                if not result.HasField("error"):
                    learned += 1
                    if result.train_segment.trained_through > 0:
                        session.models.learned(key.location, result.train_segment.trained_through)
                    if session.pushing.get(key.location) == work.seq:
                        del session.pushing[key.location]
                    continue
                reason = redact(result.error.message)
            if session.pushing.get(key.location) == work.seq:
                del session.pushing[key.location]
            log.warning(
                "a node did not learn a trained segment now; it catches up from the database",
                extra={**extra, "seq": work.seq, "error": reason},
            )
            if self.on_learning_missed is not None:
                self.on_learning_missed(work.model.engine_id)
        await self.registry.notify()
        return learned
