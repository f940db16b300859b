"""Admin control of the inference nodes: drain and undrain, pre-warm (load) or free (unload) an
engine on one node, and end the sessions of a revoked node token.

Every node keeps a session with every API replica, so each replica's registry sees the whole
fleet, and acting through this replica's session is enough: what a node does about it (draining,
loading, unloading) reaches the other replicas in its heartbeats and model statuses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from serval.inference.v1 import node_pb2
from serval_api.routing.registry import NodeRegistry
from serval_api.routing.session import NodeSession
from serval_common.aio import wait_changed
from serval_common.model_revision import ModelRevision

log = logging.getLogger(__name__)

RevokedTokens = Callable[[set[str]], Awaitable[set[str]]]
"""Of the given node token ids, those revoked (or gone)."""


class Fleet:
    def __init__(self, registry: NodeRegistry) -> None:
        self.registry = registry

    def sessions(self) -> dict[str, NodeSession]:
        """Node id → its newest open session with this replica."""
        newest: dict[str, NodeSession] = {}
        for session in self.registry.sessions():
            known = newest.get(session.node_id)
            if known is None or session.last_seen >= known.last_seen:
                newest[session.node_id] = session
        return newest

    async def drain(self, node_id: str, reason: str) -> None:
        for session in self._of(node_id):
            session.order_drain(True, reason)
        log.info("node drained by an admin", extra={"node_id": node_id, "reason": reason})
        await self.registry.notify()

    async def undrain(self, node_id: str) -> None:
        for session in self._of(node_id):
            session.order_drain(False)
        log.info("node undrained by an admin", extra={"node_id": node_id})
        await self.registry.notify()

    def load(self, session: NodeSession, model: ModelRevision) -> None:
        """Ask the node to load `model` unless it holds it or is loading it already."""
        if session.model_state(model.location) not in (
            node_pb2.MODEL_STATE_READY,
            node_pb2.MODEL_STATE_LOADING,
        ):
            session.load(model)
            log.info(
                "admin asked node to load model", extra={"node_id": session.node_id, "model": model.location}
            )

    def unload(self, session: NodeSession, engine_id: str) -> list[ModelRevision]:
        """Ask the node to unload every revision of the engine it holds; they are routed no more work
        here at once, and unloaded by the node once the work already routed to them is done."""
        held = [key for key in session.held() if key.engine_id == engine_id]
        for key in held:
            session.unload(key)
            log.info(
                "admin asked node to unload model", extra={"node_id": session.node_id, "model": key.location}
            )
        return held

    def disconnect_tokens(self, token_ids: set[str]) -> int:
        """End every session opened with one of `token_ids`; how many were ended."""
        ended = 0
        for session in self.registry.sessions():
            if session.token_id in token_ids:
                session.kick("the node token was revoked")
                ended += 1
                log.warning(
                    "node disconnected: its token was revoked",
                    extra={"node_id": session.node_id, "token_id": session.token_id},
                )
        return ended

    async def watch_revocations(
        self, revoked: RevokedTokens, interval_s: float, wake: asyncio.Event | None = None
    ) -> None:
        """Disconnect nodes whose token was revoked anywhere: checked at once when `wake` is set
        (another replica revoked one), and every `interval_s` for revocations written to the
        database by other means (`serval admin` on the database)."""
        wake = wake or asyncio.Event()
        while True:
            await wait_changed(wake, interval_s)
            wake.clear()
            in_use = {s.token_id for s in self.registry.sessions() if s.token_id}
            if not in_use:
                continue
            try:
                gone = await revoked(in_use)
            except Exception as exc:  # the database may be briefly unreachable; check again next time
                log.warning("could not check node tokens", extra={"error": str(exc)})
                continue
            if gone:
                self.disconnect_tokens(gone)

    def _of(self, node_id: str) -> list[NodeSession]:
        return [s for s in self.registry.sessions() if s.node_id == node_id]
