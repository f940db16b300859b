"""The inference node process: dials every API service address, says hello, keeps heartbeats,
answers what the API service asks, and drains on SIGTERM.

`InferenceNode` wires the node together: its model manager (`inference_gpu.model_manager`), its
work runner (`inference_gpu.work_runner`), and one `ApiLink` per API address
(`inference_gpu.api_link`), which keeps one node session alive, redialing whenever the stream
drops; each hello re-announces the models already held. The node routes every message an API
replica sends to what handles it (`handle`), and says what it has room for in each heartbeat. An
address whose host name resolves to several addresses (one per API replica, e.g. a headless
Kubernetes service) gets one link per resolved address; names are re-resolved every
`node.resolve_interval_s` to pick up new replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import grpc

from inference_gpu.api_link import ApiLink
from inference_gpu.families import available_families
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import ModelManager
from inference_gpu.work_runner import WorkRunner
from serval.inference.v1 import node_pb2
from serval_common.families import family
from serval_common.settings import Settings
from serval_common.store import store_from_settings

log = logging.getLogger(__name__)

PROTOCOL_VERSION = node_pb2.PROTOCOL_VERSION_2
VERSION = "0.1.0"


NODE_ID_FILE = "node-id-{device}"
"""Where a node started without `--node-id` keeps its id, in its home folder (one per device)."""


def default_node_id(home: Path, kind: str, index: int) -> str:
    """The id of a node started without `--node-id`: the one it used before, kept in
    `{home}/node-id-{device}`; the first time, this machine's host name and the device
    (`gpu-a-cuda0`, `laptop-cpu`), written there. So a restarted node comes back under the same id
    (the admin list, its drain, its metrics), even where the host name changes with each start (a
    container with a persistent home). Two nodes on one device of one machine each need their own
    `--node-id`."""
    device = "cpu" if kind == "cpu" else f"{kind}{index}"
    path = home / NODE_ID_FILE.format(device=device)
    with contextlib.suppress(OSError, UnicodeDecodeError):
        kept = path.read_text(encoding="utf-8").strip()
        if kept:
            return kept
    node_id = f"{socket.gethostname() or 'node'}-{device}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(node_id + "\n", encoding="utf-8")
    except OSError as exc:  # a read-only home: the derived id is as stable as the host name
        log.warning("cannot keep the node id", extra={"path": str(path), "error": str(exc)})
    return node_id


class InferenceNode:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        store = store_from_settings(settings)
        device = self.device_info()
        self.node_id = settings.node.node_id or default_node_id(settings.home, device.kind, device.index)
        self.device_kind = device.kind
        self.metrics = NodeMetrics(device_kind=device.kind, device_index=device.index)
        self.models = ModelManager(settings, store, self.metrics, segment_source=self.train_segments)
        self.families = available_families(settings.node.families)
        self.draining = False
        self.shutting_down = False
        self.work = WorkRunner(settings, self.models, self.metrics, lambda: self.draining)
        self.links = [self._link(address) for address in resolve_addresses(settings.node.api_addresses)]
        self.models.listeners.append(self._broadcast_status)
        self._background: set[asyncio.Task[Any]] = set()
        """Loads, unloads and catch-ups an API service asked for."""

    def _link(self, address: str) -> ApiLink:
        return ApiLink(address, self.settings, hello=self.hello, heartbeat=self.heartbeat, handle=self.handle)

    def device_info(self) -> node_pb2.DeviceInfo:
        import ctranslate2

        cuda = self.settings.node.device == "cuda" or (
            self.settings.node.device == "auto" and ctranslate2.get_cuda_device_count() > 0
        )
        kind = "cuda" if cuda else "cpu"
        compute = self.settings.node.compute_type
        if compute == "auto":
            compute = "int8_float16" if cuda else "int8"
        page, pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
        return node_pb2.DeviceInfo(
            kind=kind,
            index=self.settings.node.device_index,
            name=kind,
            compute_type=compute,
            memory_total_bytes=page * pages,
            memory_free_bytes=page * os.sysconf("SC_AVPHYS_PAGES"),
        )

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT (then drain) or until the API service rejects the node."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if self.settings.node.metrics_port:
            self.metrics.serve(self.settings.node.metrics_port, self.settings.node.metrics_host)
        tasks = [asyncio.create_task(link.run()) for link in self.links]
        tasks.append(asyncio.create_task(self._resolve_loop(tasks)))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        try:
            for task in done:
                if task is not stopper:
                    task.result()
            await self.drain()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.models.close()

    async def _resolve_loop(self, tasks: list[asyncio.Task[None]]) -> None:
        """Add a link for every API address that a name newly resolves to."""
        while True:
            await asyncio.sleep(self.settings.node.resolve_interval_s)
            known = {link.address for link in self.links}
            addresses = await asyncio.to_thread(resolve_addresses, self.settings.node.api_addresses)
            for address in addresses:
                if address not in known and not self.draining:
                    log.info("new API service address", extra={"api": address})
                    link = self._link(address)
                    self.links.append(link)
                    tasks.append(asyncio.create_task(link.run()))

    async def drain(self) -> None:
        """Refuse new work, finish what is in flight, say goodbye."""
        self.draining = self.shutting_down = True
        log.info("draining", extra={"node_id": self.node_id, "in_flight": len(self.work.in_flight)})
        for link in self.links:
            link.send_heartbeat()
        await self.work.finish()
        for link in self.links:
            await link.say_goodbye("node shutting down")

    async def train_segments(
        self, ref: node_pb2.ModelRef, after_seq: int = 0
    ) -> tuple[list[node_pb2.TrainSegmentOp], int]:
        """The engine's segments trained since `ref`'s build and numbered above `after_seq`, and
        the number a model has learned up to once it applied them, from the first API service that
        answers (welcomed links first); the last failure when none does."""
        links = sorted(self.links, key=lambda link: not link.registered)
        failure: Exception = ConnectionError("the node has no API service address")
        for link in links:
            try:
                return await link.train_segments(ref, after_seq)
            except grpc.RpcError as exc:
                failure = exc
        raise failure

    def set_draining(self, draining: bool, reason: str = "") -> None:
        """An admin's drain or undrain (an undrain cannot stop a shutdown); every API replica hears
        of it at once."""
        draining = draining or self.shutting_down
        if draining != self.draining:
            log.info(
                "draining" if draining else "undrained", extra={"node_id": self.node_id, "reason": reason}
            )
        self.draining = draining
        for link in self.links:
            link.send_heartbeat()

    # ---- what the node tells every API replica -------------------------------------------

    def hello(self) -> node_pb2.Hello:
        """The node's hello at each dial: who it is, its device and slots, the models it holds."""
        return node_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            node_id=self.node_id,
            device=self.device_info(),
            free_slots=self.work.free_slots(),
            models=self.models.held.statuses(),
            software_version=VERSION,
            slots=self.settings.node.slots,
            families=[node_pb2.EngineFamily.ValueType(family(name).wire) for name in self.families],
            batches=True,
        )

    def heartbeat(self) -> node_pb2.Heartbeat:
        """The node's side of a heartbeat: what it has room for, and whether it drains."""
        return node_pb2.Heartbeat(
            free_slots=self.work.free_slots(),
            memory_free_bytes=self.memory_free_bytes(),
            draining=self.draining,
            slots=self.settings.node.slots,
        )

    def memory_free_bytes(self) -> int:
        """What more models may take: the memory budget less the models held, else the host's
        available memory on a CPU node; 0 (unknown) on a GPU without a budget."""
        budget = self.settings.node.memory_budget_bytes
        if budget > 0:
            return max(1, budget - self.models.held.bytes_held())
        if self.device_kind == "cpu":
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
        return 0

    def _broadcast_status(self, status: node_pb2.ModelStatus) -> None:
        for link in self.links:
            link.send(node_pb2.NodeMessage(model_status=status))

    # ---- what the API service asks -------------------------------------------------------

    def handle(self, link: ApiLink, message: node_pb2.ApiMessage) -> None:
        """Route one message an API replica sent on `link` (a rejection the link handles itself)."""
        match message.WhichOneof("body"):
            case "work":
                self.work.start(link, message.work)
            case "work_items":
                for item in message.work_items.items:
                    self.work.start(link, item)
            case "load_model":
                self._in_background(self._load(message.load_model.model))
            case "unload_model":
                self._in_background(self.models.unload(message.unload_model.model))
            case "cancel":
                self.work.cancel(message.cancel.request_id)
            case "catch_up":
                catch_up = message.catch_up
                self._in_background(self.models.segments.catch_up(catch_up.model, catch_up.through))
            case "drain":
                self.set_draining(True, message.drain.reason)
            case "undrain":
                self.set_draining(False)

    def _in_background(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(job)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _load(self, ref: node_pb2.ModelRef) -> None:
        with contextlib.suppress(Exception):  # the manager reports failures as MODEL_STATE_FAILED
            await self.models.get(ref)


def resolve_addresses(addresses: list[str]) -> list[str]:
    """Each `host:port` as every address its host resolves to; unresolvable ones stay as given
    (the link's redial reports the failure)."""
    resolved: list[str] = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            infos = []
        ips: list[str | None] = [str(info[4][0]) for info in infos] or [None]
        for ip in ips:
            one = address if ip is None else f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            if one not in resolved:
                resolved.append(one)
    return resolved
