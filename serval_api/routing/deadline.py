"""A work item's deadline, as this service keeps it and as the node reads it.

Here a deadline is a `time.monotonic()` instant; on the wire it is wall-clock time, and the node's
answer is awaited until the same instant. Both routing a request (`request_routing`) and fanning
out a trained segment (`train_fanout`) send work items with a deadline, so the conversion and the
wait live apart from either.
"""

from __future__ import annotations

import asyncio
import time

from google.protobuf.timestamp_pb2 import Timestamp

from serval.inference.v1 import node_pb2


async def answer_by(future: asyncio.Future[node_pb2.WorkResult], deadline: float) -> node_pb2.WorkResult:
    """The node's answer by `deadline` (TimeoutError). A caller that goes away cancels the future:
    the session then forgets the request, and a late answer is dropped."""
    async with asyncio.timeout_at(asyncio.get_running_loop().time() + deadline - time.monotonic()):
        return await future


def wall_clock(deadline: float) -> Timestamp:
    """The monotonic `deadline` as the wall-clock time sent to the node."""
    stamp = Timestamp()
    stamp.FromNanoseconds(int((time.time() + deadline - time.monotonic()) * 1e9))
    return stamp
