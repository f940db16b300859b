"""Coalescing a node session's queued messages into batch messages (`WorkItems`, `WorkResults`).

Each side of a node session writes its messages from one queue. Under load a whole batch of work
items or results is queued by the time the previous write returns, and one stream write for all
of them costs both processes a fraction of what a write each costs (the stream's write and read
were the largest share of the node's and the API service's own Python time at 64 clients,
`bench --profile`). A peer that did not say it reads batches (`Hello.batches`, `Welcome.batches`:
an earlier release) gets one message per item, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TypeVar

from google.protobuf.message import Message

from serval.inference.v1 import node_pb2

Item = TypeVar("Item", bound=Message)
Wire = TypeVar("Wire", bound=Message)

MAX_BATCH_ITEMS = 128
"""The most items in one batch message."""
MAX_BATCH_BYTES = 1 << 20
"""The most serialized bytes of items in one batch message, well under gRPC's default 4 MiB
message limit (an item over it travels alone)."""


def take_queued(queue: asyncio.Queue[Item | Wire], first: Item | Wire) -> list[Item | Wire]:
    """`first` (just taken from `queue`) and everything queued behind it now, in order."""
    taken = [first]
    while not queue.empty():
        taken.append(queue.get_nowait())
    return taken


def coalesce(
    messages: list[Item | Wire],
    item_type: type[Item],
    *,
    batches: bool,
    one: Callable[[Item], Wire],
    many: Callable[[list[Item]], Wire],
) -> Iterator[Wire]:
    """The wire messages for `messages`, in order: each run of consecutive `item_type` values goes
    in batch messages (`many`, at most `MAX_BATCH_ITEMS` and about `MAX_BATCH_BYTES` each) when the
    peer reads `batches`, else one message each (`one`), as does a run of one; other messages pass
    as they are."""
    run: list[Item] = []
    size = 0
    for message in messages:
        if not isinstance(message, item_type):
            if run:
                yield _flush(run, one, many)
                run, size = [], 0
            yield message  # not an item: a wire message already
        elif not batches:
            yield one(message)
        else:
            item_size = message.ByteSize()
            if run and (len(run) >= MAX_BATCH_ITEMS or size + item_size > MAX_BATCH_BYTES):
                yield _flush(run, one, many)
                run, size = [], 0
            run.append(message)
            size += item_size
    if run:
        yield _flush(run, one, many)


def _flush(run: list[Item], one: Callable[[Item], Wire], many: Callable[[list[Item]], Wire]) -> Wire:
    return one(run[0]) if len(run) == 1 else many(run)


def node_messages(
    queued: list[node_pb2.NodeMessage | node_pb2.WorkResult], *, batches: bool
) -> Iterator[node_pb2.NodeMessage]:
    """What a node writes for its queued messages (a bare `WorkResult` is a result)."""
    return coalesce(
        queued,
        node_pb2.WorkResult,
        batches=batches,
        one=lambda result: node_pb2.NodeMessage(result=result),
        many=lambda results: node_pb2.NodeMessage(results=node_pb2.WorkResults(results=results)),
    )


def api_messages(
    queued: list[node_pb2.ApiMessage | node_pb2.WorkItem], *, batches: bool
) -> Iterator[node_pb2.ApiMessage]:
    """What the API service writes to a node for its queued messages (a bare `WorkItem` is work)."""
    return coalesce(
        queued,
        node_pb2.WorkItem,
        batches=batches,
        one=lambda item: node_pb2.ApiMessage(work=item),
        many=lambda items: node_pb2.ApiMessage(work_items=node_pb2.WorkItems(items=items)),
    )
