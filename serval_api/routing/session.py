"""One node session: the live stream between an inference node and this API service."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from serval.inference.v1 import node_pb2


class NodeGone(Exception):
    """The node session ended while work was outstanding on it."""


@dataclass
class NodeSession:
    session_id: str
    node_id: str
    device: node_pb2.DeviceInfo
    slots: int
    outbox: asyncio.Queue[node_pb2.ApiMessage] = field(default_factory=asyncio.Queue)
    models: dict[str, int] = field(default_factory=dict, repr=False)
    """Model location → node_pb2.ModelState."""
    model_errors: dict[str, str] = field(default_factory=dict, repr=False)
    pending: dict[str, asyncio.Future[node_pb2.WorkResult]] = field(default_factory=dict, repr=False)
    last_seen: float = field(default_factory=time.monotonic)
    draining: bool = False
    closed: bool = False

    @property
    def free_slots(self) -> int:
        return self.slots - len(self.pending)

    def accepts_work(self) -> bool:
        return not self.closed and not self.draining and self.free_slots > 0

    def model_state(self, location: str) -> int:
        return self.models.get(location, node_pb2.MODEL_STATE_UNSPECIFIED)

    def send(self, message: node_pb2.ApiMessage) -> None:
        self.outbox.put_nowait(message)

    def submit(self, request_id: str, item: node_pb2.WorkItem) -> asyncio.Future[node_pb2.WorkResult]:
        future: asyncio.Future[node_pb2.WorkResult] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.send(node_pb2.ApiMessage(work=item))
        return future

    def resolve(self, result: node_pb2.WorkResult) -> None:
        future = self.pending.pop(result.request_id, None)
        if future is not None and not future.done():
            future.set_result(result)

    def forget(self, request_id: str) -> None:
        self.pending.pop(request_id, None)

    def close(self) -> None:
        self.closed = True
        for future in self.pending.values():
            if not future.done():
                future.set_exception(NodeGone(f"node {self.node_id} went away"))
        self.pending.clear()
