"""Telling listeners what became of a revision on this node: the `ModelStatus` messages (loading,
ready, failed, unloaded) that the node forwards to every API replica.

It stands apart because every part of the model manager announces (loads and unloads, the store
fetcher's retries, the trained segments' progress) and each is handed this one announcer rather
than reaching into the manager for it.
"""

from __future__ import annotations

from collections.abc import Callable

from inference_gpu.loaded_model import LoadedModel
from serval.inference.v1 import node_pb2
from serval_common.redact import redact, secret_values
from serval_common.settings import Settings

StatusListener = Callable[[node_pb2.ModelStatus], None]


def ready_status(ref: node_pb2.ModelRef, loaded: LoadedModel) -> node_pb2.ModelStatus:
    """READY for a revision the ready `loaded` serves: the model's size now, and what a learning
    model has learned up to."""
    return node_pb2.ModelStatus(
        model=ref,
        state=node_pb2.MODEL_STATE_READY,
        size_bytes=loaded.held_bytes(),
        trained_through=loaded.trained_through,
    )


class StatusAnnouncer:
    """Sends each revision's status to `listeners`, masking this node's secrets in its message."""

    def __init__(self, settings: Settings) -> None:
        self._secrets = secret_values(settings)
        self.listeners: list[StatusListener] = []

    def announce(self, ref: node_pb2.ModelRef, state: int, message: str = "") -> None:
        """The message travels to every API replica and on to admins: store URLs, paths and
        credentials are masked (the log keeps them)."""
        status = node_pb2.ModelStatus(
            model=ref,
            state=state,  # type: ignore[arg-type]
            message=redact(message, self._secrets),
        )
        self._send(status)

    def ready(self, ref: node_pb2.ModelRef, loaded: LoadedModel) -> None:
        """Announce `ref` READY, served by `loaded` (see `ready_status`)."""
        self._send(ready_status(ref, loaded))

    def _send(self, status: node_pb2.ModelStatus) -> None:
        for listener in self.listeners:
            listener(status)
