"""Routing one request to a node: translate, translate-n, word graph and align.

A node that already holds the model revision and has a free slot is preferred (least loaded
first); otherwise a node is told to load it (`placement.Placement.request_load`) and the request
waits for the load within its deadline. Work is never sent beyond a node's advertised slots.
A request that finds no free slot waits its turn (`fair_waiters.FairWaiters`: interactive first,
owner by owner, one woken per freed slot), at most `api.max_queued_per_owner` of one owner and
`api.max_queued_requests` in all. Translation is idempotent, so work on a node that goes away is
retried once on another node. A request whose caller gives up (deadline passed, client cancelled)
is cancelled on the node too.

Weights: work for a revision goes to a node holding its weights ready under any revision, which
aliases them without a load, so a new engine on a loaded base model answers at once. What differs
per engine (its languages, owner checks, `X-Model-Revision`) stays with the revision.

Families: a node serves the engine families it claimed in Hello; work for an engine goes only to
nodes serving its family.

This picks one node for one request and awaits its answer; which nodes should hold which weights
(loading, spreading, the hot swap, retiring) is `placement`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from serval.inference.v1 import node_pb2
from serval_api.errors import InvalidArgument, NotFound, NotSupported, ServalError, Unavailable
from serval_api.routing.deadline import answer_by, wall_clock
from serval_api.routing.fair_waiters import FairWaiters, Waiter
from serval_api.routing.held import LOADING, READY
from serval_api.routing.placement import Placement, load_fraction, newest_older
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeGone, NodeSession, model_ref
from serval_api.routing.work import AlignWork, Served, TranslateWork, WordGraphWork
from serval_common.core import Sender, TranslationResult, WordAlignmentResult, WordGraph, WorkClass
from serval_common.model_revision import ModelRevision
from serval_common.node_codec import (
    CLASS_TO_WIRE,
    DETAIL_TO_WIRE,
    alignment_from_wire,
    graph_from_wire,
    result_from_wire,
)
from serval_common.redact import redact
from serval_common.settings import Settings

log = logging.getLogger(__name__)

Operation = node_pb2.TranslateOp | node_pb2.WordGraphOp | node_pb2.AlignOp


class RequestRouter:
    def __init__(self, registry: NodeRegistry, settings: Settings, placement: Placement) -> None:
        self.registry = registry
        self.settings = settings
        self.placement = placement
        self._waiting = 0
        self._waiters = FairWaiters()
        self.on_slot_taken: Callable[[WorkClass, float], None] | None = None
        """Told each request's class and how long it waited for its node slot (`/metrics`)."""
        registry.change_hooks.append(lambda structural: self._wake(everyone=structural))

    def queue_size(self) -> int:
        """Requests waiting for a node slot or a model load."""
        return self._waiting

    async def translate(
        self, work: TranslateWork, *, request_id: str, timeout_s: float
    ) -> Served[list[TranslationResult]]:
        op = node_pb2.TranslateOp(
            segment=work.segment,
            n=work.n,
            source_language=work.source_language,
            target_language=work.target_language,
            target_prefix=work.prefix,
            detail=DETAIL_TO_WIRE[work.detail],
        )
        result, served = await self._run(
            work.model, work.family, work.sender, request_id, timeout_s, translate=op
        )
        return Served([result_from_wire(r) for r in result.translate.results], served.revision)

    async def word_graph(
        self, work: WordGraphWork, *, request_id: str, timeout_s: float
    ) -> Served[WordGraph]:
        op = node_pb2.WordGraphOp(
            segment=work.segment, source_language=work.source_language, target_language=work.target_language
        )
        result, served = await self._run(
            work.model, work.family, work.sender, request_id, timeout_s, word_graph=op
        )
        return Served(graph_from_wire(result.word_graph), served.revision)

    async def align(
        self, work: AlignWork, *, request_id: str, timeout_s: float
    ) -> Served[WordAlignmentResult]:
        op = node_pb2.AlignOp(source_segment=work.source_segment, target_segment=work.target_segment)
        result, served = await self._run(
            work.model, work.family, work.sender, request_id, timeout_s, align=op
        )
        return Served(alignment_from_wire(result.alignment), served.revision)

    async def _run(
        self,
        model: ModelRevision,
        family: str,
        sender: Sender,
        request_id: str,
        timeout_s: float,
        **operation: Operation,
    ) -> tuple[node_pb2.WorkResult, ModelRevision]:
        deadline = time.monotonic() + timeout_s
        tried: set[str] = set()
        for attempt in range(2):
            session, served = await self._acquire(model, family, sender, deadline, exclude=tried)
            item = work_item(request_id, deadline, served, sender, **operation)
            future = session.submit(request_id, item)
            try:
                result = await answer_by(future, deadline)
            except NodeGone:
                tried.add(session.session_id)
                log.warning(
                    "node went away with work in flight; retrying",
                    extra={"request_id": request_id, "node_id": session.node_id, "attempt": attempt},
                )
                continue
            except (TimeoutError, asyncio.CancelledError) as exc:
                session.forget(request_id)
                session.send(node_pb2.ApiMessage(cancel=node_pb2.Cancel(request_id=request_id)))
                if isinstance(exc, asyncio.CancelledError):
                    log.info(
                        "caller went away; work cancelled on the node",
                        extra={"request_id": request_id, "node_id": session.node_id},
                    )
                    raise
                raise Unavailable(f"the translation did not finish within {timeout_s:g} s") from None
            finally:
                await self.registry.notify(slots_only=True)
            if result.HasField("error") and result.error.code == node_pb2.WORK_ERROR_CODE_OVERLOADED:
                tried.add(session.session_id)
                log.info(
                    "node refused work (draining or full); retrying elsewhere",
                    extra={"request_id": request_id, "node_id": session.node_id, "attempt": attempt},
                )
                continue
            if result.HasField("error"):
                log.warning(
                    "the inference node could not do the work",
                    extra={
                        "request_id": request_id,
                        "node_id": session.node_id,
                        "code": result.error.code,
                        "error": result.error.message,
                    },
                )
                raise _work_error(result.error)
            return result, served
        raise Unavailable("no inference node could take the request; try again", retry_after_s=1)

    async def _acquire(
        self, model: ModelRevision, family: str, sender: Sender, deadline: float, exclude: set[str]
    ) -> tuple[NodeSession, ModelRevision]:
        """Wait until a node holds `model` ready with a free slot, asking one to load it if none does.
        While no node has `model` ready, a node with an older revision of the engine ready serves.

        A request takes a free slot at once only while nobody waits; otherwise it waits its turn
        among the waiters (`FairWaiters`: interactive first, owner by owner), and is woken when a
        slot it could use is free for it, or when anything else changed that it must rescan for."""
        api = self.settings.api
        if self._waiting >= api.max_queued_requests:
            raise Unavailable("too many requests are waiting for an inference node", retry_after_s=1)
        if self._waiters.waiting(sender.owner) >= api.max_queued_per_owner:
            raise Unavailable(
                "too many of your requests are waiting for an inference node; "
                "wait for some to be answered and try again",
                retry_after_s=1,
            )
        if self.placement.retiring(model.engine_id):
            raise NotFound(f"engine {model.engine_id} not found")
        model = self.placement.current(model)

        def usable(session: NodeSession) -> bool:
            return (
                session.session_id not in exclude
                and family in session.families
                and not session.draining
                and not session.closed
            )

        def fits(session: NodeSession) -> bool:
            """Whether `session` could serve this request now, its free slots aside (as the scan
            below decides: `model` ready there, or an older revision while none has it ready)."""
            if not usable(session):
                return False
            if session.serves(model) == READY:
                return True
            if newest_older(model, [session]) is None:
                return False
            return not any(usable(s) and s.serves(model) == READY for s in self.registry.sessions())

        waiter: Waiter | None = None
        started = time.monotonic()
        self._waiting += 1
        try:
            while True:
                connected = [
                    s
                    for s in self.registry.sessions()
                    if s.session_id not in exclude and family in s.families
                ]
                if not connected:
                    raise Unavailable(
                        f"no inference node serving {family} engines is connected", retry_after_s=1
                    )
                sessions = [s for s in connected if not s.draining]
                if not sessions:
                    raise Unavailable("every inference node is draining", retry_after_s=5)
                ready = [s for s in sessions if s.serves(model) == READY]
                free = [s for s in ready if s.accepts_work()]
                self.placement.spread_if_hot(model, sessions, ready)
                older = None if ready else newest_older(model, sessions)
                if not any(s.serves(model) in (READY, LOADING) for s in sessions):
                    try:
                        self.placement.request_load(model, sessions)
                    except Unavailable:
                        if older is None:
                            raise
                chosen = (min(free, key=load_fraction), model) if free else older
                if chosen is not None:
                    if waiter is None and self._waiters:
                        # Others wait: this request takes its turn among them (it goes now only if
                        # the fair order gives it one of the free slots).
                        waiter = self._waiters.add(sender, fits)
                        self._wake(everyone=False)
                    if waiter is None or waiter.woken:
                        self._waiters.admitted(sender.owner)
                        if waiter is not None:
                            self._waiters.remove(waiter)
                            waiter = None
                        if self.on_slot_taken is not None:
                            self.on_slot_taken(sender.work_class, time.monotonic() - started)
                        return chosen
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Unavailable("no inference node could take the request in time", retry_after_s=1)
                if waiter is None:
                    waiter = self._waiters.add(sender, fits)
                await waiter.wait(remaining)
                if self.placement.retiring(model.engine_id):
                    raise NotFound(f"engine {model.engine_id} not found")
        finally:
            self._waiting -= 1
            if waiter is not None:
                self._waiters.remove(waiter)
                if waiter.woken:  # it gives up the slot it was woken for: the next in turn takes it
                    self._wake(everyone=False)

    def _wake(self, *, everyone: bool) -> None:
        self._waiters.wake(self.registry.sessions(), everyone=everyone)


def work_item(
    request_id: str, deadline: float, model: ModelRevision, sender: Sender, **operation: Operation
) -> node_pb2.WorkItem:
    """The work item sent to a node: its operation on `model`, due by `deadline` (monotonic
    seconds), and who sent it (the node's batcher takes turns between owners)."""
    return node_pb2.WorkItem(
        request_id=request_id,
        deadline=wall_clock(deadline),
        model=model_ref(model),
        owner=sender.owner,
        key_id=sender.key_id,
        work_class=CLASS_TO_WIRE[sender.work_class],
        **operation,
    )


def _work_error(error: node_pb2.WorkError) -> ServalError:
    """The node's text, sanitized: a node's store errors name its store and cache folders."""
    message = redact(error.message)
    if error.code == node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT:
        return InvalidArgument(message)
    if error.code == node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED:
        return NotSupported(message)
    return Unavailable(f"the inference node could not translate: {message}", retry_after_s=1)
