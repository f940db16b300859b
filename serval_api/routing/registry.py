"""The node sessions connected to this API service, and the wake-ups for waiters whenever capacity or
model state changes anywhere.

`notify` runs on every answer a node sends, so it costs nothing when nobody waits: the event a
waiter waits on is made only when someone waits, and replaced each time it fires. Requests waiting
for a node slot do not wait on that event: `change_hooks` (the request router's fair waiters) hear
each change and wake them in fair order, one per freed slot when only slots were freed
(`notify(slots_only=True)`), every one on any other change."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from serval.inference.v1 import node_pb2
from serval_api.routing.session import NodeSession
from serval_common.aio import wait_changed
from serval_common.model_revision import short_weights
from serval_common.redact import redact

log = logging.getLogger(__name__)

ModelStateListener = Callable[[NodeSession, node_pb2.ModelStatus], None]
ChangeHook = Callable[[bool], None]
"""Called on every `notify` with whether the change was structural (not only slots freed)."""


class NodeRegistry:
    def __init__(self) -> None:
        self._sessions: dict[str, NodeSession] = {}
        self._changed: asyncio.Event | None = None
        self.listeners: list[ModelStateListener] = []
        self.change_hooks: list[ChangeHook] = []

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

    async def notify(self, *, slots_only: bool = False) -> None:
        """Wake every `wait_for_change` now waiting, and tell `change_hooks`. `slots_only`: the
        change only freed node slots (work answered), so no more waiters need waking than slots."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        for hook in self.change_hooks:
            hook(not slots_only)

    async def wait_for_change(self, timeout_s: float) -> None:
        """Until the next `notify`, for at most `timeout_s`."""
        if self._changed is None:
            self._changed = asyncio.Event()
        await wait_changed(self._changed, timeout_s)

    def set_model_state(self, session: NodeSession, status: node_pb2.ModelStatus) -> None:
        location = status.model.location
        before = session.models.state(location)
        session.models.set(
            location,
            status.state,
            status.model.weights,
            status.size_bytes,
            status.trained_through if status.HasField("trained_through") else None,
        )
        if status.state == node_pb2.MODEL_STATE_FAILED:
            session.failed_at[location] = time.monotonic()
        else:
            session.failed_at.pop(location, None)
        failing = status.state in (node_pb2.MODEL_STATE_FAILED, node_pb2.MODEL_STATE_LOADING)
        if failing and status.message:
            session.model_errors[location] = redact(status.message)
        else:
            session.model_errors.pop(location, None)
        if status.state != before or status.message:
            log.info(
                "model status",
                extra={
                    "node_id": session.node_id,
                    "model": location,
                    "state": _state_name(status.state),
                    "weights": short_weights(status.model.weights),
                    "detail": status.message,
                },
            )
        for listener in self.listeners:
            listener(session, status)


def _state_name(state: int) -> str:
    """A newer node may report a state this service does not know (proto3 enums are open)."""
    return node_pb2.ModelState.Name(state) if state in node_pb2.ModelState.values() else str(state)
