"""The node's memory budget: least recently used idle models make room; busy ones never do; an
`smt-transfer` model counts what its worker process holds; an unload does not stop the node's
event loop."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import ctranslate2
import pytest

from build_jobs.publish import publish_revision
from inference_gpu.families.nmt.backends import BACKENDS
from inference_gpu.families.nmt.backends.ctranslate2 import CTranslate2Backend
from inference_gpu.families.nmt.model import NmtModel
from inference_gpu.families.smt.model import SmtModel
from inference_gpu.memory_budget import MemoryBudgetExceeded
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import ModelManager
from serval.inference.v1 import node_pb2
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import NodeSettings, Settings
from serval_common.store import open_store
from tests.helpers import distinct_weights


def ref(revision: int) -> node_pb2.ModelRef:
    return node_pb2.ModelRef(engine_id="e1", revision=revision, location=f"models/e1/{revision}")


def manager(tmp_path: Path, model_dir: Path, budget_models: float) -> tuple[ModelManager, list[str]]:
    store = open_store((tmp_path / "store").as_uri())
    size = 0
    for revision in (1, 2, 3):
        manifest = Manifest(
            kind="model-revision",
            engine_id="e1",
            revision=revision,
            source_language="eng_Latn",
            target_language="swh_Latn",
            ctranslate2_version=ctranslate2.__version__,
        )
        folder = distinct_weights(model_dir, str(revision))
        size = publish_folder(store, f"models/e1/{revision}", folder, manifest).size_bytes
    settings = Settings(home=tmp_path, node=NodeSettings(memory_budget_bytes=int(size * budget_models)))
    models = ModelManager(settings, store, NodeMetrics())
    events: list[str] = []
    models.listeners.append(
        lambda s: events.append(f"{s.model.revision}:{node_pb2.ModelState.Name(s.state)}")
    )
    return models, events


def test_loading_past_the_budget_unloads_the_least_recently_used_idle_model(
    tmp_path: Path, tiny_ct2_model: Path
) -> None:
    async def scenario() -> None:
        models, events = manager(tmp_path, tiny_ct2_model, 2.5)
        await models.get(ref(1))
        await models.get(ref(2))
        await models.get(ref(1))
        await models.get(ref(3))
        assert models.held.loaded() == ["models/e1/1", "models/e1/3"]
        assert "2:MODEL_STATE_UNLOADED" in events and "1:MODEL_STATE_UNLOADED" not in events
        assert models.metrics is not None and models.metrics.evictions._value.get() == 1
        await models.close()

    asyncio.run(scenario())


def test_a_model_in_use_is_never_unloaded_to_make_room(tmp_path: Path, tiny_ct2_model: Path) -> None:
    async def scenario() -> None:
        models, events = manager(tmp_path, tiny_ct2_model, 1.5)
        await models.get(ref(1))
        models.held.hold("models/e1/1")
        with pytest.raises(MemoryBudgetExceeded, match="memory budget"):
            await models.get(ref(2))
        assert events[-1] == "2:MODEL_STATE_FAILED"
        assert models.held.loaded() == ["models/e1/1"]
        models.held.release("models/e1/1")
        await models.get(ref(2))
        assert models.held.loaded() == ["models/e1/2"]
        await models.close()

    asyncio.run(scenario())


def test_unload_waits_until_work_routed_to_the_model_finishes(tmp_path: Path, tiny_ct2_model: Path) -> None:
    async def scenario() -> None:
        models, events = manager(tmp_path, tiny_ct2_model, 0)
        model = await models.get(ref(1))
        models.held.hold("models/e1/1")
        unloading = asyncio.create_task(models.unload(ref(1)))
        translation = asyncio.create_task(model.translate("In the beginning", 1, "eng_Latn", "swh_Latn"))
        await asyncio.sleep(0.1)
        assert not unloading.done()
        models.held.release("models/e1/1")
        results = await translation
        await unloading
        assert results and models.held.loaded() == []
        assert events[-1] == "1:MODEL_STATE_UNLOADED"

    asyncio.run(scenario())


def cached_revisions(models: ModelManager) -> list[int]:
    """The revisions with a copy in the node's disk cache, least recently used first."""
    return [int(path.parent.name) for path in models.fetcher.cached()]


def test_the_disk_cache_keeps_to_its_budget_evicting_unloaded_revisions_first(
    tmp_path: Path, tiny_ct2_model: Path
) -> None:
    async def scenario() -> None:
        store = open_store((tmp_path / "store").as_uri())
        size = 0
        for revision in (1, 2, 3, 4):
            manifest = Manifest(
                kind="model-revision",
                engine_id="e1",
                revision=revision,
                source_language="eng_Latn",
                target_language="swh_Latn",
                ctranslate2_version=ctranslate2.__version__,
            )
            folder = distinct_weights(tiny_ct2_model, str(revision))
            size = publish_folder(store, f"models/e1/{revision}", folder, manifest).size_bytes
        settings = Settings(home=tmp_path, node=NodeSettings(cache_budget_bytes=int(size * 2.5)))
        models = ModelManager(settings, store, NodeMetrics())

        async def use(revision: int) -> None:
            await models.get(ref(revision))
            await asyncio.sleep(0.02)  # distinct modification times order the cache

        await use(1)
        await use(2)
        assert cached_revisions(models) == [1, 2]
        await models.unload(ref(1))
        await use(3)
        assert cached_revisions(models) == [2, 3], "unloaded revision 1 goes; loaded 2 and 3 stay"
        await use(4)
        assert cached_revisions(models) == [2, 3, 4], "over budget, but every copy is loaded"
        await models.unload(ref(3))
        await asyncio.sleep(0.02)
        await models.unload(ref(2))
        await use(1)
        assert cached_revisions(models) == [4, 1], "the least recently used unloaded copies go first"
        assert models.held.loaded() == ["models/e1/4", "models/e1/1"]
        assert not (settings.node_cache_dir / "models" / "e1" / "2").exists()
        translated = await (await models.get(ref(1))).translate("In the beginning", 1, "eng_Latn", "swh_Latn")
        assert translated
        await models.close()

        unlimited = ModelManager(Settings(home=tmp_path), store, NodeMetrics())
        for revision in (1, 2, 3):
            await unlimited.get(ref(revision))
            await unlimited.unload(ref(revision))
        assert sorted(cached_revisions(unlimited)) == [1, 2, 3, 4], "0 = unlimited: nothing is deleted"
        await unlimited.close()

    asyncio.run(scenario())


def test_revisions_sharing_weights_are_one_model_to_the_budget_and_to_eviction(
    tmp_path: Path, tiny_ct2_model: Path
) -> None:
    """Five inference-only revisions of one base model fit a budget of one and a half models: they
    are one loaded model. A second set of weights evicts it, with every revision it served."""

    async def scenario() -> None:
        store = open_store((tmp_path / "store").as_uri())
        base = publish_folder(
            store, "base-models/tiny", tiny_ct2_model, Manifest(kind="base-model", name="tiny")
        )
        for engine in range(5):
            publish_folder(
                store,
                f"models/e{engine}/1",
                None,
                Manifest(
                    kind="model-revision", engine_id=f"e{engine}", revision=1, weights_from="base-models/tiny"
                ),
            )
        other = publish_folder(
            store,
            "models/tuned/1",
            distinct_weights(tiny_ct2_model, "tuned"),
            Manifest(kind="model-revision", engine_id="tuned", revision=1),
        )
        settings = Settings(home=tmp_path, node=NodeSettings(memory_budget_bytes=int(base.size_bytes * 1.5)))
        models = ModelManager(settings, store, NodeMetrics())
        events: list[str] = []
        models.listeners.append(
            lambda s: events.append(f"{s.model.location}:{node_pb2.ModelState.Name(s.state)}")
        )
        refs = [node_pb2.ModelRef(engine_id=f"e{i}", revision=1, location=f"models/e{i}/1") for i in range(5)]
        served = {id(await models.get(ref)) for ref in refs}
        assert len(served) == 1, "every revision is served by the same loaded model"
        assert models.held.loaded() == [ref.location for ref in refs]
        assert models.held.bytes_held() == base.size_bytes, "the shared weights count once"
        assert models.metrics is not None and models.metrics.load_time._sum.get() > 0
        assert models.metrics.models_loaded._value.get() == 1
        assert models.metrics.revisions_loaded._value.get() == 5
        statuses = models.held.statuses()
        assert len({s.model.weights for s in statuses}) == 1 and {s.size_bytes for s in statuses} == {
            base.size_bytes
        }

        await models.get(node_pb2.ModelRef(engine_id="tuned", revision=1, location="models/tuned/1"))
        assert models.held.loaded() == ["models/tuned/1"]
        assert models.held.bytes_held() == other.size_bytes
        assert models.metrics.evictions._value.get() == 1, "one eviction unloaded all five revisions"
        assert {f"{ref.location}:MODEL_STATE_UNLOADED" for ref in refs} <= set(events)
        await models.close()

    asyncio.run(scenario())


def test_unloading_one_revision_keeps_the_weights_its_sibling_serves(
    tmp_path: Path, tiny_ct2_model: Path
) -> None:
    async def scenario() -> None:
        store = open_store((tmp_path / "store").as_uri())
        publish_folder(store, "base-models/tiny", tiny_ct2_model, Manifest(kind="base-model", name="tiny"))
        refs = []
        for engine in ("a", "b"):
            publish_folder(
                store,
                f"models/{engine}/1",
                None,
                Manifest(
                    kind="model-revision", engine_id=engine, revision=1, weights_from="base-models/tiny"
                ),
            )
            refs.append(node_pb2.ModelRef(engine_id=engine, revision=1, location=f"models/{engine}/1"))
        models = ModelManager(Settings(home=tmp_path), store, NodeMetrics())
        model = await models.get(refs[0])
        weights = models.held.statuses()[0].model.weights
        # The API service names the weights: the second engine is aliased without reading its manifest.
        store.delete("models/b/1/manifest.json")
        shared = node_pb2.ModelRef(engine_id="b", revision=1, location="models/b/1", weights=weights)
        assert await models.get(shared) is model
        await models.unload(refs[0])
        assert models.held.loaded() == ["models/b/1"]
        assert await models.get(shared) is model
        await models.unload(shared)
        assert models.held.loaded() == [] and models.held.bytes_held() == 0
        await models.close()

    asyncio.run(scenario())


def resident_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_an_smt_model_counts_what_its_worker_process_holds(tmp_path: Path, thot_model: Path) -> None:
    """An `smt-transfer` model runs in a worker process of its own, whose resident memory is far
    larger than the model's folder: the budget counts the process (read again each time, as the
    model grows by learning), so a budget room for one such model holds one, not dozens."""

    async def no_segments(
        ref: node_pb2.ModelRef, after_seq: int
    ) -> tuple[list[node_pb2.TrainSegmentOp], int]:
        return [], after_seq

    async def scenario() -> None:
        store = open_store((tmp_path / "store").as_uri())
        for engine in ("smt-a", "smt-b"):
            manifest = Manifest(
                kind="model-revision",
                backend="thot-smt",
                engine_id=engine,
                revision=1,
                build_id=f"build-{engine}",
                source_language="en",
                target_language="sw",
            )
            folder_bytes = publish_revision(store, manifest, thot_model).size_bytes
        measure = ModelManager(Settings(home=tmp_path / "measure"), store, segment_source=no_segments)
        first = await measure.get(smt_ref("smt-a"))
        assert isinstance(first, SmtModel)
        held = measure.held.bytes_held()
        assert held > 10 * folder_bytes, "the worker process, not the folder"
        assert abs(held - resident_bytes(first.worker_process_id)) < 0.05 * held
        await measure.close()

        settings = Settings(home=tmp_path, node=NodeSettings(memory_budget_bytes=int(held * 1.5)))
        models = ModelManager(settings, store, NodeMetrics(), segment_source=no_segments)
        a = await models.get(smt_ref("smt-a"))
        assert isinstance(a, SmtModel)
        await a.train_segment("In the beginning", "Hapo mwanzo", True, 1)
        assert abs(models.held.bytes_held() - resident_bytes(a.worker_process_id)) < 0.05 * held
        await models.get(smt_ref("smt-b"))
        assert models.held.loaded() == ["models/smt-b/1"], (
            "two worker processes do not fit: the idle one went"
        )
        assert models.metrics is not None and models.metrics.evictions._value.get() == 1
        await models.close()

    asyncio.run(scenario())


def smt_ref(engine_id: str) -> node_pb2.ModelRef:
    return node_pb2.ModelRef(engine_id=engine_id, revision=1, location=f"models/{engine_id}/1")


class SlowUnload(CTranslate2Backend):
    """The real CTranslate2 backend whose unload, like a large model's, takes a while: it lasts
    until the test releases it (at most `UNLOAD_HOLD_S`, then it says it was not released)."""

    started = threading.Event()
    release = threading.Event()
    timed_out = False

    def unload(self) -> None:
        SlowUnload.started.set()
        if not SlowUnload.release.wait(UNLOAD_HOLD_S):
            SlowUnload.timed_out = True
        super().unload()


UNLOAD_HOLD_S = 30


def test_requests_are_answered_while_a_large_model_unloads(
    tmp_path: Path, tiny_ct2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An NMT model is freed in a worker thread: while one unloads, the node's event loop answers
    requests for another (were the unload on the loop, nothing would be answered until it ended,
    and it ends only when the test, having had the answers, releases it)."""
    monkeypatch.setitem(BACKENDS, CTranslate2Backend.name, SlowUnload)

    async def scenario() -> None:
        models, events = manager(tmp_path, tiny_ct2_model, 10)
        await models.get(ref(1))
        other = await models.get(ref(2))
        assert isinstance(other, NmtModel)
        unloading = asyncio.create_task(models.unload(ref(1)))
        assert await asyncio.to_thread(SlowUnload.started.wait, UNLOAD_HOLD_S)
        async with asyncio.timeout(UNLOAD_HOLD_S / 2):
            for segment in ("In the beginning", "God created the heavens", "and the earth"):
                [result] = await other.translate(segment, 1, "eng_Latn", "swh_Latn")
                assert result.translation
        assert not unloading.done(), "the unload is still freeing the model"
        SlowUnload.release.set()
        await unloading
        assert not SlowUnload.timed_out
        assert models.held.loaded() == ["models/e1/2"] and "1:MODEL_STATE_UNLOADED" in events
        await models.close()

    asyncio.run(scenario())
