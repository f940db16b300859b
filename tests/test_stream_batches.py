"""Coalescing a node session's queued messages (`serval_common.stream_batches`): runs of work
items or results go in batch messages, in order, bounded in count and bytes, and a peer that does
not read batches gets one message per item."""

from __future__ import annotations

import asyncio

from serval.inference.v1 import node_pb2
from serval_common import stream_batches
from serval_common.stream_batches import api_messages, node_messages, take_queued


def _result(i: int, text: str = "") -> node_pb2.WorkResult:
    return node_pb2.WorkResult(
        request_id=f"r{i}",
        translate=node_pb2.TranslateOutput(results=[node_pb2.TranslationResult(translation=text or f"t{i}")]),
    )


def _heartbeat() -> node_pb2.NodeMessage:
    return node_pb2.NodeMessage(heartbeat=node_pb2.Heartbeat(free_slots=3))


def _ids(message: node_pb2.NodeMessage) -> list[str]:
    match message.WhichOneof("body"):
        case "results":
            return [r.request_id for r in message.results.results]
        case "result":
            return [message.result.request_id]
    return [str(message.WhichOneof("body"))]


def test_runs_of_results_are_batched_around_other_messages_in_order() -> None:
    queued = [_result(1), _result(2), _heartbeat(), _result(3), _result(4), _result(5), _heartbeat()]
    wire = list(node_messages(queued, batches=True))
    assert [m.WhichOneof("body") for m in wire] == ["results", "heartbeat", "results", "heartbeat"]
    assert [_ids(m) for m in wire] == [["r1", "r2"], ["heartbeat"], ["r3", "r4", "r5"], ["heartbeat"]]
    assert wire[2].results.results[1].translate.results[0].translation == "t4"


def test_a_lone_result_travels_as_a_result() -> None:
    wire = list(node_messages([_heartbeat(), _result(1), _heartbeat()], batches=True))
    assert [m.WhichOneof("body") for m in wire] == ["heartbeat", "result", "heartbeat"]


def test_a_peer_that_does_not_read_batches_gets_one_message_per_item() -> None:
    wire = list(node_messages([_result(1), _result(2), _heartbeat(), _result(3)], batches=False))
    assert [m.WhichOneof("body") for m in wire] == ["result", "result", "heartbeat", "result"]
    assert [_ids(m) for m in wire] == [["r1"], ["r2"], ["heartbeat"], ["r3"]]


def test_batches_are_bounded_in_count() -> None:
    count = stream_batches.MAX_BATCH_ITEMS * 2 + 1
    wire = list(node_messages([_result(i) for i in range(count)], batches=True))
    assert [len(_ids(m)) for m in wire] == [stream_batches.MAX_BATCH_ITEMS] * 2 + [1]
    assert [i for m in wire for i in _ids(m)] == [f"r{i}" for i in range(count)]


def test_batches_are_bounded_in_bytes_and_a_large_item_travels_alone() -> None:
    third = "x" * (stream_batches.MAX_BATCH_BYTES // 3)
    huge = "y" * (stream_batches.MAX_BATCH_BYTES + 10)
    queued = [_result(1, third), _result(2, third), _result(3, third), _result(4, huge), _result(5)]
    wire = list(node_messages(queued, batches=True))
    assert [_ids(m) for m in wire] == [["r1", "r2"], ["r3"], ["r4"], ["r5"]]
    assert all(m.ByteSize() < 4 * 1024 * 1024 for m in wire), "under gRPC's default message limit"


def test_work_items_are_batched_for_the_node() -> None:
    items = [node_pb2.WorkItem(request_id=f"w{i}") for i in range(3)]
    cancel = node_pb2.ApiMessage(cancel=node_pb2.Cancel(request_id="w0"))
    wire = list(api_messages([*items, cancel], batches=True))
    assert [m.WhichOneof("body") for m in wire] == ["work_items", "cancel"]
    assert [i.request_id for i in wire[0].work_items.items] == ["w0", "w1", "w2"]
    assert [m.WhichOneof("body") for m in api_messages(items, batches=False)] == ["work"] * 3


def test_take_queued_takes_what_is_queued_now_in_order() -> None:
    async def run() -> tuple[list[str], bool]:
        queue: asyncio.Queue[node_pb2.ApiMessage | node_pb2.WorkItem] = asyncio.Queue()
        for text in "abc":
            queue.put_nowait(node_pb2.WorkItem(request_id=text))
        taken = take_queued(queue, await queue.get())
        return [m.request_id for m in taken if isinstance(m, node_pb2.WorkItem)], queue.empty()

    assert asyncio.run(run()) == (["a", "b", "c"], True)
