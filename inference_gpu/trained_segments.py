"""Trained segments on an inference node: replaying an engine's trained pairs into a freshly
loaded model, learning pushed pairs and catching up (`TrainedSegments`, which
`inference_gpu.model_manager.ModelManager` holds and hands what the node holds, the announcer and
the way to unload a model once idle).

Models that learn segments (`ServedModel.learns_segments`: `smt-transfer`, whose weights are never
shared) replay the engine's trained segments before they are announced READY: the manager asks
`segment_source` (the node asks the API service, `InferenceNodeApi.GetTrainSegments`) and applies
them in order. While the API service cannot be reached the replay is retried like a fetch, for up
to `node.load_retry_s`; past that, or on any other failure, the load is FAILED: a model that
silently missed segments is never served.

Such a model keeps its trained-through number (`LoadedModel.trained_through`: every pair of the
engine up to it is in the model), announced with every READY status. A pushed pair (`learn`) is
learned only by a model this node holds ready (a pair never starts a load), skipped when the model
has it, and, when the model lacks the pair before it, preceded by fetching everything after the
model's number; a `CatchUp` from any API replica (`catch_up`) fetches and applies what the model
lacks. Pairs are applied in order, one model at a time (`LoadedModel.learning`). A model that
fails to learn a pair is unloaded once idle, so its next load replays every pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

import grpc

from inference_gpu.families import ServedModel
from inference_gpu.held_models import HeldModels
from inference_gpu.loaded_model import LoadedModel, model_lost
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_status import StatusAnnouncer
from serval.inference.v1 import node_pb2
from serval_common.settings import Settings
from serval_common.store import StoreError

log = logging.getLogger("inference_gpu.model_manager")
"""The model manager's logger: these records are the manager's."""

SegmentSource = Callable[[node_pb2.ModelRef, int], Awaitable[tuple[list[node_pb2.TrainSegmentOp], int]]]
"""The segments trained on an engine after the build of the revision `ModelRef` names and numbered
above the given number, in order, and the number the model has learned up to once it applied them
(`TrainSegmentsChunk.through`)."""


class SegmentsUnavailable(StoreError):
    """The engine's trained segments could not be fetched, so the model is not served.

    A `StoreError`, so work that waited for the model is answered "model unavailable"."""


class ModelNotLoaded(StoreError):
    """A pair arrived for a revision this node does not hold ready: it is not loaded for it (a model
    that is loading replays the pair on completion; a failed one is not retried by a pair).

    A `StoreError`, so the work item is answered "model unavailable"."""


class TrainedSegments:
    """The trained-segment operations on the models the node holds."""

    def __init__(
        self,
        settings: Settings,
        held: HeldModels,
        announcer: StatusAnnouncer,
        unload_when_idle: Callable[[LoadedModel, str], None],
        segment_source: SegmentSource | None = None,
        metrics: NodeMetrics | None = None,
    ) -> None:
        self.settings = settings
        self._held = held
        self._announcer = announcer
        self._unload_when_idle = unload_when_idle
        """Unload a model (that failed to learn a pair) once idle, without waiting for it."""
        self.segment_source = segment_source
        self.metrics = metrics

    async def replay(self, ref: node_pb2.ModelRef, model: ServedModel, stop: asyncio.Event) -> int:
        """Apply the engine's trained segments to a freshly loaded model, retrying while the API
        service is unreachable (see the module docstring); the number it has learned up to."""
        node = self.settings.node
        deadline = time.monotonic() + node.load_retry_s
        delay = node.load_retry_initial_s
        attempt = 0
        while True:
            attempt += 1
            try:
                segments, through = await self._fetch_segments(ref, 0)
                break
            except Exception as exc:
                remaining = deadline - time.monotonic()
                if not _retryable(exc) or remaining <= 0 or stop.is_set():
                    raise SegmentsUnavailable(
                        f"the trained segments of {ref.location} could not be fetched ({attempt} attempts): {exc}"
                    ) from exc
                wait = min(delay * random.uniform(0.5, 1.5), node.load_retry_max_s, remaining)
                delay = min(delay * 2, node.load_retry_max_s)
                log.warning(
                    "trained segments unavailable while loading; retrying",
                    extra={
                        "model": ref.location,
                        "attempt": attempt,
                        "retry_in_s": round(wait, 2),
                        "error": str(exc),
                    },
                )
                self._announcer.announce(
                    ref,
                    node_pb2.MODEL_STATE_LOADING,
                    f"trained segments unavailable (attempt {attempt}): {exc}; next attempt in {wait:.1f} s",
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
        for segment in segments:
            await model.train_segment(
                segment.source_segment, segment.target_segment, segment.sentence_start, segment.seq
            )
        if segments:
            log.info("trained segments replayed", extra={"model": ref.location, "segments": len(segments)})
        return through

    async def _fetch_segments(
        self, ref: node_pb2.ModelRef, after_seq: int
    ) -> tuple[list[node_pb2.TrainSegmentOp], int]:
        if self.segment_source is None:
            raise SegmentsUnavailable(
                f"{ref.location} learns trained segments but this node has no API service to fetch them from"
            )
        segments, through = await self.segment_source(ref, after_seq)
        return segments, max(through, after_seq, segments[-1].seq if segments else 0)

    # ---- learning what was trained -------------------------------------------------------

    async def learn(self, ref: node_pb2.ModelRef, op: node_pb2.TrainSegmentOp) -> int:
        """Learn a pushed pair into the revision's ready model (never loading one: `ModelNotLoaded`)
        and return what the model has learned up to. A pair it has already is skipped; one whose
        `previous_seq` it lacks means it missed a pair, so it fetches everything after what it has
        (this pair included) and applies it in order."""
        loaded = self._learning_model(ref)
        model = loaded.model
        assert model is not None
        if loaded.trained_through is None:
            await model.train_segment(op.source_segment, op.target_segment, op.sentence_start, op.seq)
            return 0
        async with loaded.learning:
            through = loaded.trained_through
            if op.seq and op.seq <= through:
                return through
            try:
                if op.previous_seq > through:
                    log.info(
                        "a pushed pair follows one this model lacks: fetching what it lacks",
                        extra={
                            "model": ref.location,
                            "trained_through": through,
                            "previous_seq": op.previous_seq,
                        },
                    )
                    await self._apply_missing(loaded, ref)
                if not op.seq or op.seq > loaded.trained_through:
                    await model.train_segment(op.source_segment, op.target_segment, op.sentence_start, op.seq)
                    loaded.trained_through = max(loaded.trained_through, op.seq)
            except SegmentsUnavailable:
                raise
            except Exception as exc:
                self._learning_failed(loaded, ref, exc)
                raise
            finally:
                self._announce_learned(loaded, through)
        return loaded.trained_through

    async def catch_up(self, ref: node_pb2.ModelRef, through: int) -> None:
        """The API service says the engine's pairs are numbered up to `through`: a ready model that
        has learned less fetches and applies the rest. Anything else (not loaded here, loading,
        learning nothing, up to date) is ignored, but the model's number is announced again so the
        API service's view of it is right."""
        try:
            loaded = self._learning_model(ref)
        except ModelNotLoaded:
            return
        if loaded.trained_through is None:
            return
        if through <= loaded.trained_through:
            self._announce_learned(loaded, -1)
            return
        self._held.hold(ref.location)
        try:
            async with loaded.learning:
                had = loaded.trained_through
                if through > had and loaded.model is not None:
                    try:
                        await self._apply_missing(loaded, ref)
                    except SegmentsUnavailable as exc:
                        log.warning(
                            "could not fetch trained segments to catch up; asked again later",
                            extra={"model": ref.location, "error": str(exc)},
                        )
                    except Exception as exc:
                        self._learning_failed(loaded, ref, exc)
                    finally:
                        self._announce_learned(loaded, had)
        finally:
            self._held.release(ref.location)

    def _learning_model(self, ref: node_pb2.ModelRef) -> LoadedModel:
        loaded = self._held.by_revision.get(ref.location)
        if loaded is None or loaded.model is None or model_lost(loaded.model):
            raise ModelNotLoaded(
                f"{ref.location} is not loaded on this node; a load of it replays the engine's trained segments"
            )
        return loaded

    async def _apply_missing(self, loaded: LoadedModel, ref: node_pb2.ModelRef) -> None:
        """Fetch the pairs numbered above what the model has learned and apply them in order; the
        model's number moves with each one, so what was applied stays applied if one fails."""
        model = loaded.model
        assert model is not None and loaded.trained_through is not None
        had = loaded.trained_through
        try:
            segments, through = await self._fetch_segments(ref, had)
        except Exception as exc:
            raise SegmentsUnavailable(
                f"the trained segments of {ref.location} could not be fetched: {exc}"
            ) from exc
        for segment in segments:
            if segment.seq <= loaded.trained_through:
                continue
            await model.train_segment(
                segment.source_segment, segment.target_segment, segment.sentence_start, segment.seq
            )
            loaded.trained_through = segment.seq
        loaded.trained_through = max(loaded.trained_through, through)
        if self.metrics is not None:
            self.metrics.segments_caught_up.inc(len(segments))
        log.info(
            "caught up on trained segments",
            extra={
                "model": ref.location,
                "from": had,
                "through": loaded.trained_through,
                "segments": len(segments),
            },
        )

    def _announce_learned(self, loaded: LoadedModel, before: int) -> None:
        """Tell every API replica what the model has learned up to, when it changed (`before`)."""
        if loaded.model is None or loaded.trained_through is None or loaded.trained_through == before:
            return
        for ref in list(loaded.aliases.values()):
            self._announcer.ready(ref, loaded)

    def _learning_failed(self, loaded: LoadedModel, ref: node_pb2.ModelRef, exc: Exception) -> None:
        """The model could not learn a pair: it is unloaded once idle (a model that missed a pair is
        never served), and the next request loads it again, replaying every pair; a pair the model
        cannot learn then fails that load. A dead worker has dropped the model already."""
        if loaded.model is None or model_lost(loaded.model):
            return
        log.error(
            "model failed to learn a trained segment: unloading it",
            extra={"model": ref.location, "error": str(exc)},
        )
        self._unload_when_idle(loaded, f"failed to learn a pair: {exc}")


def _retryable(exc: BaseException) -> bool:
    """Whether fetching trained segments may succeed later: the API service unreachable or
    overloaded, not a refusal."""
    if isinstance(exc, grpc.RpcError):
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        return code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
    return isinstance(exc, ConnectionError | TimeoutError)
