"""The node's memory budget: least recently used idle models make room; busy ones never do."""

from __future__ import annotations

import asyncio
from pathlib import Path

import ctranslate2
import pytest

from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import MemoryBudgetExceeded, ModelManager
from serval.inference.v1 import node_pb2
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import NodeSettings, Settings
from serval_common.store import open_store


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
        size = publish_folder(store, f"models/e1/{revision}", model_dir, manifest).size_bytes
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
        assert models.loaded() == ["models/e1/1", "models/e1/3"]
        assert "2:MODEL_STATE_UNLOADED" in events and "1:MODEL_STATE_UNLOADED" not in events
        assert models.metrics is not None and models.metrics.evictions._value.get() == 1
        await models.close()

    asyncio.run(scenario())


def test_a_model_in_use_is_never_unloaded_to_make_room(tmp_path: Path, tiny_ct2_model: Path) -> None:
    async def scenario() -> None:
        models, events = manager(tmp_path, tiny_ct2_model, 1.5)
        await models.get(ref(1))
        models.hold("models/e1/1")
        with pytest.raises(MemoryBudgetExceeded, match="memory budget"):
            await models.get(ref(2))
        assert events[-1] == "2:MODEL_STATE_FAILED"
        assert models.loaded() == ["models/e1/1"]
        models.release("models/e1/1")
        await models.get(ref(2))
        assert models.loaded() == ["models/e1/2"]
        await models.close()

    asyncio.run(scenario())


def test_unload_waits_until_work_routed_to_the_model_finishes(tmp_path: Path, tiny_ct2_model: Path) -> None:
    async def scenario() -> None:
        models, events = manager(tmp_path, tiny_ct2_model, 0)
        model = await models.get(ref(1))
        models.hold("models/e1/1")
        unloading = asyncio.create_task(models.unload(ref(1)))
        translation = asyncio.create_task(model.translate("In the beginning", 1, "eng_Latn", "swh_Latn"))
        await asyncio.sleep(0.1)
        assert not unloading.done()
        models.release("models/e1/1")
        results = await translation
        await unloading
        assert results and models.loaded() == []
        assert events[-1] == "1:MODEL_STATE_UNLOADED"

    asyncio.run(scenario())


def cached_revisions(models: ModelManager) -> list[int]:
    """The revisions with a copy in the node's disk cache, least recently used first."""
    return [int(path.parent.name) for path in models.cached()]


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
            size = publish_folder(store, f"models/e1/{revision}", tiny_ct2_model, manifest).size_bytes
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
        assert models.loaded() == ["models/e1/4", "models/e1/1"]
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
