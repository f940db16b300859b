"""The node sessions connected to this API service, and one condition that wakes waiters
whenever capacity or model state changes anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from serval.inference.v1 import node_pb2
from serval_api.routing.session import NodeSession
from serval_common.redact import redact

log = logging.getLogger(__name__)

ModelStateListener = Callable[[NodeSession, node_pb2.ModelStatus], None]


class NodeRegistry:
    def __init__(self) -> None:
        self._sessions: dict[str, NodeSession] = {}
        self._changed = asyncio.Condition()
        self.listeners: list[ModelStateListener] = []

    def sessions(self) -> list[NodeSession]:
        return [s for s in self._sessions.values() if not s.closed]

    async def add(self, session: NodeSession) -> None:
        self._sessions[session.session_id] = session
        log.info(
            "node session opened",
            extra={"node_id": session.node_id, "session_id": session.session_id, "slots": session.slots},
        )
        await self.notify()

    async def remove(self, session: NodeSession, reason: str) -> None:
        if self._sessions.pop(session.session_id, None) is None:
            return
        session.close()
        log.info("node session closed", extra={"node_id": session.node_id, "reason": reason})
        await self.notify()

    async def notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_change(self, timeout_s: float) -> None:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)

    def set_model_state(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        location = status.model.location
        if status.state == node_pb2.MODEL_STATE_UNLOADED:
            session.models.pop(location, None)
            session.model_sizes.pop(location, None)
        else:
            session.models[location] = status.state
        if status.size_bytes > 0:
            session.model_sizes[location] = status.size_bytes
        if status.state == node_pb2.MODEL_STATE_FAILED:
            session.failed_at[location] = time.monotonic()
        else:
            session.failed_at.pop(location, None)
        failing = status.state in (node_pb2.MODEL_STATE_FAILED, node_pb2.MODEL_STATE_LOADING)
        if failing and status.message:
            session.model_errors[location] = redact(status.message)
        else:
            session.model_errors.pop(location, None)
        log.info(
            "model status",
            extra={
                "node_id": session.node_id,
                "model": location,
                "state": _state_name(status.state),
                "detail": status.message,
            },
        )
        for listener in self.listeners:
            listener(session, status)


def _state_name(state: int) -> str:
    """A newer node may report a state this service does not know (proto3 enums are open)."""
    return node_pb2.ModelState.Name(state) if state in node_pb2.ModelState.values() else str(state)
