"""The stored pairs a node replays into a model revision it loads or catches up (families that learn
segments): `InferenceNodeApi.GetTrainSegments` and `StreamTrainSegments` read them here, a page
of the database at a time, checked against the node's token and the revision it names.

It stands apart from `node_api` (the node session's stream) because it is a separate call with
its own reads; `learning` decides when a node must catch up.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol

import grpc

from serval.inference.v1 import node_pb2
from serval_api.routing.work import ReplayStart, TrainSegmentWork
from serval_common.model_revision import ModelRevision

log = logging.getLogger(__name__)

REPLAY_PAGE_ROWS = 1000
"""Pairs read from the database at once for a node."""
CHUNK_BYTES = 1 << 20
"""StreamTrainSegments sends at most about this much in one message (gRPC's default limit is 4 MiB)."""


class TrainSegmentSource(Protocol):
    """The engine's stored pairs a node loading (or catching up) a model revision applies."""

    async def start(self, model: ModelRevision, after_seq: int = 0) -> ReplayStart | None:
        """Where the revision's replay starts; None when the engine or a completed build of that
        revision does not exist."""

    async def page(self, start: ReplayStart, after: int, limit: int) -> list[TrainSegmentWork]:
        """At most `limit` pairs numbered above `after`, oldest first."""


class ReplayRefused(Exception):
    """The node may not have these pairs (`code` is the call's status)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SegmentReplay:
    """The pairs of one `GetTrainSegmentsRequest`, read from `source` (None: this API service keeps
    no train segments)."""

    def __init__(self, source: TrainSegmentSource | None) -> None:
        self.source = source

    async def start(self, request: node_pb2.GetTrainSegmentsRequest, token_id: str | None) -> ReplayStart:
        """Where the replay starts, or `ReplayRefused` (no token, a bad model, no such revision)."""
        if token_id is None:
            raise ReplayRefused(grpc.StatusCode.UNAUTHENTICATED, "invalid or revoked node token")
        model = _model_key(request.model)
        if model is None:
            raise ReplayRefused(
                grpc.StatusCode.INVALID_ARGUMENT, "model: expected the location models/{engineId}/{revision}"
            )
        if request.after_seq < 0:
            raise ReplayRefused(grpc.StatusCode.INVALID_ARGUMENT, "after_seq: must not be negative")
        if self.source is None:
            raise ReplayRefused(grpc.StatusCode.UNIMPLEMENTED, "this API service keeps no train segments")
        start = await self.source.start(model, request.after_seq)
        if start is None:
            raise ReplayRefused(grpc.StatusCode.NOT_FOUND, f"model {model.location} not found")
        return start

    async def pages(self, start: ReplayStart) -> AsyncIterator[list[node_pb2.TrainSegmentOp]]:
        """The pairs after `start`, a database page at a time."""
        assert self.source is not None
        after = start.after
        while pairs := await self.source.page(start, after, REPLAY_PAGE_ROWS):
            after = pairs[-1].seq
            yield [
                node_pb2.TrainSegmentOp(
                    source_segment=pair.source_segment,
                    target_segment=pair.target_segment,
                    sentence_start=pair.sentence_start,
                    seq=pair.seq,
                )
                for pair in pairs
            ]

    async def whole(self, start: ReplayStart) -> node_pb2.GetTrainSegmentsResponse:
        """Every pair after `start` in one message (`GetTrainSegments`, for nodes of earlier releases)."""
        segments: list[node_pb2.TrainSegmentOp] = []
        async for page in self.pages(start):
            segments.extend(page)
        _log_sent(start, len(segments))
        return node_pb2.GetTrainSegmentsResponse(
            segments=segments, through=segments[-1].seq if segments else start.after
        )

    async def chunks(self, start: ReplayStart) -> AsyncIterator[node_pb2.TrainSegmentsChunk]:
        """The same pairs in messages of at most about `CHUNK_BYTES`; the last one (maybe empty)
        says what the node has learned up to once it applied them all."""
        chunk: list[node_pb2.TrainSegmentOp] = []
        size = sent = 0
        async for page in self.pages(start):
            for op in page:
                op_size = op.ByteSize() + 8
                if chunk and size + op_size > CHUNK_BYTES:
                    yield node_pb2.TrainSegmentsChunk(segments=chunk, through=chunk[-1].seq)
                    sent += len(chunk)
                    chunk, size = [], 0
                chunk.append(op)
                size += op_size
        sent += len(chunk)
        yield node_pb2.TrainSegmentsChunk(segments=chunk, through=chunk[-1].seq if chunk else start.after)
        _log_sent(start, sent)


def _log_sent(start: ReplayStart, count: int) -> None:
    log.info(
        "train segments sent for replay",
        extra={"model": start.model.location, "after_seq": start.after, "segments": count},
    )


def _model_key(ref: node_pb2.ModelRef) -> ModelRevision | None:
    if ref.location:
        key = ModelRevision.parse(ref.location)
        if key is None or (ref.engine_id and ref.engine_id != key.engine_id):
            return None
        return key
    return ModelRevision(ref.engine_id, ref.revision) if ref.engine_id and ref.revision > 0 else None
