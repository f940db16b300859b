"""Prometheus metrics of one inference node, served on `node.metrics_port` (0 = off).

Each node owns its own registry, so several nodes in one process (tests) never collide.
Owners are never a label: their number has no bound (every SIL Converters translator's key can be
an owner), and each would multiply the series every scrape stores, on an endpoint that is often
less guarded than the admin API. The work class (interactive, bulk) labels queue wait and batch
slots instead, and the number of owners per batch shows whether owners are taking turns.

Device memory comes from NVML when `pynvml` is importable and the node runs on CUDA, else it is
the process's resident memory.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from serval_common.core import WorkClass

if TYPE_CHECKING:
    from inference_gpu.families.nmt.backends import Hypothesis, TranslateRequest

log = logging.getLogger(__name__)

LOAD_FAILURE_REASONS = ("store_unavailable", "checksum", "memory", "other")
"""The `reason` label of the model load failure counters: the model store unreachable (retried),
a file failing checksum verification, the node's memory budget, anything else."""

_LOAD_SECONDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class NodeMetrics:
    def __init__(self, *, device_kind: str = "cpu", device_index: int = 0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.batch_size = Histogram(
            "serval_node_batch_size",
            "Requests per backend batch.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.queue_wait = Histogram(
            "serval_node_queue_wait_seconds",
            "Time a request waited in the micro-batcher, by work class (interactive or bulk).",
            ["work_class"],
            buckets=_SECONDS,
            registry=r,
        )
        self.batch_slots = Counter(
            "serval_node_batch_slots",
            "Requests run in backend batches, by work class: each class's share of the batches.",
            ["work_class"],
            registry=r,
        )
        for work_class in WorkClass:
            self.queue_wait.labels(work_class=work_class.value)
            self.batch_slots.labels(work_class=work_class.value)
        self.batch_owners = Histogram(
            "serval_node_batch_owners",
            "Distinct owners in one backend batch (owners with queued requests take turns in a batch).",
            buckets=(1, 2, 3, 4, 8, 16, 32),
            registry=r,
        )
        self.work_time = Histogram(
            "serval_node_work_seconds",
            "Time from a work item's arrival to its answer being sent, by operation: the node's share "
            "of a request's latency (queue wait and inference included).",
            ["operation"],
            buckets=_SECONDS,
            registry=r,
        )
        self.inference_time = Histogram(
            "serval_node_inference_seconds", "Backend time per batch.", buckets=_SECONDS, registry=r
        )
        self.target_tokens = Counter(
            "serval_node_target_tokens", "Target tokens produced (best hypotheses).", registry=r
        )
        self.models_loaded = Gauge(
            "serval_node_models_loaded",
            "Loaded models: sets of weights in memory, each counted once however many revisions use it.",
            registry=r,
        )
        self.revisions_loaded = Gauge(
            "serval_node_revisions_loaded",
            "Model revisions served by the loaded models (a model serves every revision of its weights).",
            registry=r,
        )
        self.batch_engines = Histogram(
            "serval_node_batch_engines",
            "Distinct engines in one backend batch (engines sharing a loaded model share its batches).",
            buckets=(1, 2, 3, 4, 8, 16, 32),
            registry=r,
        )
        self.load_time = Histogram(
            "serval_node_model_load_seconds",
            "Time to fetch and load a model revision.",
            buckets=_LOAD_SECONDS,
            registry=r,
        )
        self.fetch_time = Histogram(
            "serval_node_model_fetch_seconds",
            "Time to download and check a model revision's files (part of the load time).",
            buckets=_LOAD_SECONDS,
            registry=r,
        )
        self.cache_hits = Counter(
            "serval_node_model_cache_hits", "Requests for a model revision already loaded.", registry=r
        )
        self.cache_misses = Counter(
            "serval_node_model_cache_misses", "Requests for a model revision not loaded.", registry=r
        )
        self.evictions = Counter(
            "serval_node_model_evictions", "Idle models unloaded to fit the memory budget.", registry=r
        )
        self.load_failures = Counter(
            "serval_node_model_load_failures",
            "Failed attempts to fetch or load a model revision, by reason; model store outages are "
            "retried, so one load can fail several times before it succeeds or fails for good.",
            ["reason"],
            registry=r,
        )
        self.loads_failed = Counter(
            "serval_node_model_loads_failed",
            "Model revision loads that ended FAILED (reported to the API service), by reason.",
            ["reason"],
            registry=r,
        )
        for reason in LOAD_FAILURE_REASONS:
            self.load_failures.labels(reason=reason)
            self.loads_failed.labels(reason=reason)
        self.loads_retrying = Gauge(
            "serval_node_model_loads_retrying",
            "Model revision loads waiting to retry after the model store was unreachable.",
            registry=r,
        )
        self.segments_caught_up = Counter(
            "serval_node_train_segments_caught_up",
            "Trained segments a loaded model fetched and learned after missing them (a push that did not "
            "reach it, a gap, a CatchUp from an API replica); a model's load replays are not counted.",
            registry=r,
        )
        memory = Gauge(
            "serval_node_device_memory_used_bytes", "Device (or process) memory in use.", registry=r
        )
        memory.set_function(_memory_probe(device_kind, device_index))

    def observe_batch(
        self,
        requests: Sequence[TranslateRequest],
        waits: Sequence[float],
        seconds: float,
        results: Sequence[list[Hypothesis]],
    ) -> None:
        self.batch_size.observe(len(waits))
        self.batch_engines.observe(len({request.engine for request in requests}))
        self.batch_owners.observe(len({request.sender.owner for request in requests}))
        for request, wait in zip(requests, waits, strict=True):
            work_class = request.sender.work_class.value
            self.queue_wait.labels(work_class=work_class).observe(wait)
            self.batch_slots.labels(work_class=work_class).inc()
        self.inference_time.observe(seconds)
        self.target_tokens.inc(sum(len(hypotheses[0].tokens) for hypotheses in results if hypotheses))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)
        log.info("serving node metrics", extra={"host": host, "port": port})


def _memory_probe(device_kind: str, device_index: int) -> Callable[[], float]:
    if device_kind == "cuda":
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)

            def gpu_used() -> float:
                return float(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

            return gpu_used
        except Exception as exc:
            log.info("NVML unavailable; reporting process memory", extra={"error": str(exc)})
    return process_rss_bytes


def process_rss_bytes() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return float(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except OSError:
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
