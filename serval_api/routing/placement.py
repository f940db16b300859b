"""Placement: which node loads which weights, and the hot swap from one revision to the next.

Request routing (`request_routing`) asks for a load only when no node holds or loads a request's
weights; everything else that moves models onto and off nodes is here, together with what it
remembers: the weights each revision serves, each engine's newest revision, and the engines being
retired. It stands apart from routing because it acts on the fleet as a whole (every node holding an
engine, whatever request is waiting), where routing picks one node for one request.

Loading: the node asked is preferably one replacing an older revision of the engine, then one with
memory to spare, then the least loaded. A node whose load failed is asked again once
`api.failed_load_retry_s` has passed.

Spreading: when every node holding a revision is loaded past `api.spread_load_fraction` of its
slots, one more node is told to load it, so a hot engine is served by several nodes at once.

Deleting an engine retires it: nothing more is routed to it, every node is told to unload its
revisions (each finishes the work already routed to them first) and the caller waits until they
have, so the engine's files can then leave the model store without pulling them from under a node.

Weights: a node holds each set of weights once, and every revision serving them is an alias of
that loaded model (`serval_common.model_revision`). Spreading a hot model, failover and retries all
go by weights. The weights of each revision come with the work (the API service records them when a
build completes) or from what nodes reported.

Hot swap: while no node has an engine's current revision ready, requests go to the newest older
revision that is ready somewhere (`newest_older`) and some node is told to load the current one.
Once a node reports a revision ready, older revisions of that engine are unloaded everywhere (each
node finishes the work already routed to them first).

Read your writes: a build's completion first has the nodes serving the engine load the new
revision (`prefetch`, bounded by `api.completion_load_wait_s`), so a translate that follows the
build's Completed is answered by the new revision, as Serval's engines answer. A node's FAILED is
final: it retried what may pass (the store, the API service unreachable) itself, so a failed
revision is asked again only by a request, `api.failed_load_retry_s` later.
"""

from __future__ import annotations

import logging
import time

from serval.inference.v1 import node_pb2
from serval_api.errors import Unavailable
from serval_api.routing.held import FAILED, LOADING, READY, UNSPECIFIED
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeSession
from serval_common.model_revision import ModelRevision
from serval_common.settings import Settings

log = logging.getLogger(__name__)


class Placement:
    def __init__(self, registry: NodeRegistry, settings: Settings) -> None:
        self.registry = registry
        self.settings = settings
        self._weights: dict[str, str] = {}
        """Revision location → the weights it serves, as published or as a node reported them."""
        self._newest: dict[str, int] = {}
        """Engine id → the newest revision published or reported ready: a request that read an
        older current revision just before a swap is served by the newer one."""
        self._retiring: dict[str, set[tuple[str, str]]] = {}
        """Engine id → the (session id, model location) pairs not yet reported unloaded."""
        registry.listeners.append(self._model_state_changed)

    def retiring(self, engine_id: str) -> bool:
        """Whether the engine is being deleted: nothing more is routed to it."""
        return engine_id in self._retiring

    def current(self, model: ModelRevision) -> ModelRevision:
        """The revision a request for `model` is served by: the engine's newest published or ready
        one when that is newer, with its weights where known."""
        newest = self._newest.get(model.engine_id, 0)
        if newest > model.revision:
            model = ModelRevision(model.engine_id, newest)
        return self._known(model)

    def request_load(self, model: ModelRevision, sessions: list[NodeSession]) -> None:
        """Ask the best of `sessions` to load `model` (Unavailable when none can). A node that failed
        to load it is asked again once `api.failed_load_retry_s` has passed (the store may be back);
        a revision that fails its checksum fails again, unserved."""
        retry_before = time.monotonic() - self.settings.api.failed_load_retry_s
        candidates = [
            s
            for s in sessions
            if not s.draining
            and (
                s.model_state(model.location) != FAILED or s.failed_at.get(model.location, 0) <= retry_before
            )
        ]
        if not candidates:
            reasons = "; ".join(sorted({s.model_errors.get(model.location, "") for s in sessions} - {""}))
            raise Unavailable(f"no inference node could load model {model.location}: {reasons or 'draining'}")
        _send_load(_best_for_load(model, candidates, sessions), model, why="requested")

    def spread_if_hot(
        self, model: ModelRevision, sessions: list[NodeSession], ready: list[NodeSession]
    ) -> None:
        """One more of `sessions` loads `model` when every node holding it `ready` is loaded past
        the spread fraction and none is loading it."""
        if ready and self._hot(model, sessions, ready):
            candidates = [s for s in sessions if s.accepts_work() and s.serves(model) == UNSPECIFIED]
            if candidates:
                _send_load(_best_for_load(model, candidates, sessions), model, why="spreading a hot engine")

    def _hot(self, model: ModelRevision, sessions: list[NodeSession], ready: list[NodeSession]) -> bool:
        fraction = self.settings.api.spread_load_fraction
        if fraction <= 0 or any(s.serves(model) == LOADING for s in sessions):
            return False
        return all(s.in_flight >= fraction * s.slots for s in ready)

    async def retire_engine(self, engine_id: str, timeout_s: float) -> bool:
        """Unload every revision of the engine from every node and wait up to `timeout_s` until each
        node reports it unloaded (its work for it done) or its session ends. Whether all did."""
        self._newest.pop(engine_id, None)
        self._weights = {loc: w for loc, w in self._weights.items() if not _of_engine(loc, engine_id)}
        waiting = self._retiring.setdefault(engine_id, set())
        try:
            for session in self.registry.sessions():
                for key in session.held():
                    if key.engine_id == engine_id:
                        session.unload(key)
                        waiting.add((session.session_id, key.location))
            if waiting:
                log.info(
                    "asked nodes to unload a deleted engine",
                    extra={"engine_id": engine_id, "models": len(waiting)},
                )
            await self.registry.notify()
            deadline = time.monotonic() + timeout_s
            while True:
                live = {s.session_id for s in self.registry.sessions()}
                waiting.intersection_update((sid, loc) for sid, loc in list(waiting) if sid in live)
                if not waiting:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning(
                        "nodes did not unload a deleted engine in time",
                        extra={"engine_id": engine_id, "models": sorted(loc for _, loc in waiting)},
                    )
                    return False
                await self.registry.wait_for_change(remaining)
        finally:
            self._retiring.pop(engine_id, None)

    async def prefetch(self, engine_id: str, revision: int, timeout_s: float, weights: str = "") -> bool:
        """Before a build reads Completed: every node holding an older revision of the engine loads
        the new one, and the caller waits up to `timeout_s` until a node has it ready (which then
        supersedes the older ones, `_model_state_changed`), or none is loading it any more (failed,
        or the node went away). True when it is ready, or when no node served the engine (its
        first request then loads the new revision itself); False after a failure or the timeout,
        the older revision then serving until the load ends (the hot swap). A node holding the
        new revision's weights already (an inference-only build of a loaded base model) has it
        ready at once."""
        if engine_id in self._retiring:
            return True
        model = self._learn(ModelRevision(engine_id, revision, weights))
        serving = [s for s in self.registry.sessions() if not s.draining and _older_revisions(s, model)]
        for session in serving:
            if session.model_state(model.location) not in (READY, LOADING):
                _send_load(session, model, why="build completing")
        ids = {s.session_id for s in serving}
        deadline = time.monotonic() + timeout_s
        while True:
            sessions = [s for s in self.registry.sessions() if s.session_id in ids]
            if any(s.serves(model) == READY for s in self.registry.sessions()):
                return True
            if not any(s.serves(model) == LOADING for s in sessions):
                return not serving
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning(
                    "the new revision was not ready in time; the build completes and the older "
                    "revision serves until it is",
                    extra={"engine_id": engine_id, "model": model.location, "waited_s": timeout_s},
                )
                return False
            await self.registry.wait_for_change(remaining)

    def loading(self, model: ModelRevision) -> bool:
        """Whether a node is loading `model` (or its weights) now."""
        model = self._known(model)
        return any(session.serves(model) == LOADING for session in self.registry.sessions())

    def revision_withdrawn(self, engine_id: str, revision: int) -> None:
        """A prefetched revision whose build did not complete (canceled meanwhile): nothing more is
        routed to it and every node unloads it."""
        model = ModelRevision(engine_id, revision)
        if self._newest.get(engine_id, 0) >= revision:
            self._newest.pop(engine_id, None)
        for session in self.registry.sessions():
            if session.model_state(model.location) != UNSPECIFIED:
                session.unload(model)

    def revision_published(
        self, engine_id: str, revision: int, *, weights: str = "", prefetched: bool = False
    ) -> None:
        """Load ahead: every node holding an older revision of the engine starts loading the new one.
        `prefetched`: the build's completion already asked them (`prefetch`), and a node whose load
        failed then is not asked again (a failed revision is retried by a request, not by this)."""
        if engine_id in self._retiring:
            return
        model = self._learn(ModelRevision(engine_id, revision, weights))
        self._newest[engine_id] = max(revision, self._newest.get(engine_id, 0))
        if prefetched:
            return
        for session in self.registry.sessions():
            if (
                not session.draining
                and session.serves(model) not in (READY, LOADING)
                and _older_revisions(session, model)
            ):
                _send_load(session, model, why="published")

    def _model_state_changed(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        if status.model.weights and status.state in (READY, LOADING):
            self._weights[status.model.location] = status.model.weights
        retiring = self._retiring.get(status.model.engine_id)
        if retiring is not None:
            if status.state == node_pb2.MODEL_STATE_UNLOADED:
                retiring.discard((session.session_id, status.model.location))
            elif (session.session_id, status.model.location) not in retiring:
                # A load that raced the deletion: unload it too.
                session.unload(ModelRevision(status.model.engine_id, status.model.revision))
                retiring.add((session.session_id, status.model.location))
            return
        if status.state != READY or session.draining:
            return
        model = self._learn(
            ModelRevision(status.model.engine_id, status.model.revision, status.model.weights)
        )
        self._newest[model.engine_id] = max(model.revision, self._newest.get(model.engine_id, 0))
        for other in self.registry.sessions():
            for old in _older_revisions(other, model):
                self._weights.pop(old.location, None)
                other.unload(old)
                log.info(
                    "asked node to unload superseded model",
                    extra={"node_id": other.node_id, "model": old.location, "by": model.location},
                )

    def _learn(self, model: ModelRevision) -> ModelRevision:
        """Remember the weights a revision serves (when given), or fill them in from what is known."""
        if model.weights:
            self._weights[model.location] = model.weights
            return model
        return self._known(model)

    def _known(self, model: ModelRevision) -> ModelRevision:
        if model.weights:
            return model
        return model.with_weights(self._weights.get(model.location, ""))


def load_fraction(session: NodeSession) -> float:
    """How busy the node is, as a fraction of its slots (work from every replica)."""
    return session.in_flight / max(1, session.slots)


def newest_older(
    model: ModelRevision, sessions: list[NodeSession]
) -> tuple[NodeSession, ModelRevision] | None:
    """The hot swap's stand-in while no node has `model` ready: a free session with the newest older
    revision of the engine ready, least loaded first."""
    choices = [
        (older.revision, -load_fraction(session), session, older)
        for session in sessions
        if session.accepts_work()
        for older in _older_revisions(session, model)
        if session.model_state(older.location) == READY
    ]
    if not choices:
        return None
    _, _, session, older = max(choices, key=lambda choice: (choice[0], choice[1]))
    return session, older


def _of_engine(location: str, engine_id: str) -> bool:
    revision = ModelRevision.parse(location)
    return revision is not None and revision.engine_id == engine_id


def _send_load(session: NodeSession, model: ModelRevision, *, why: str) -> None:
    session.load(model)
    log.info(
        "asked node to load model", extra={"node_id": session.node_id, "model": model.location, "why": why}
    )


def _best_for_load(
    model: ModelRevision, candidates: list[NodeSession], sessions: list[NodeSession]
) -> NodeSession:
    """Prefer a node replacing an older revision of the engine, then one with memory to spare for
    the model (its size as another node reported it; unknown memory counts as room), then the least
    loaded, then the one holding fewest models."""
    size = max((s.models.size_of(model) for s in sessions), default=0)

    def rank(session: NodeSession) -> tuple[bool, bool, float, int]:
        room = session.memory_free_bytes == 0 or session.memory_free_bytes >= size
        return (not _older_revisions(session, model), not room, load_fraction(session), len(session.models))

    return min(candidates, key=rank)


def _older_revisions(session: NodeSession, model: ModelRevision) -> list[ModelRevision]:
    """Revisions of `model`'s engine older than it that the session holds (loading or ready)."""
    return [
        key for key in session.held() if key.engine_id == model.engine_id and key.revision < model.revision
    ]
