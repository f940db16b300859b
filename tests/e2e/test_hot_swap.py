"""Hot swap under load: an in-process API service (builds reported by the test through the
platform API) and a real inference node process. Clients translate continuously while the
engine's revision changes; none fails, and the old revision is unloaded afterwards."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import ctranslate2
import httpx
import pytest

from build_jobs.base_model import make_tiny_base_model
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_common.manifest import InputFormat, Manifest, publish_folder
from serval_common.store import open_store
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.test_translate_path import VERSE, direct_translation
from tests.helpers import free_port, verse_pairs

CLIENTS = 4


@pytest.fixture(scope="module")
def second_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sources, targets = verse_pairs("engwebp", "swh1850", 600)
    return make_tiny_base_model(
        tmp_path_factory.mktemp("tiny2"), sources[300:], targets[300:], "eng_Latn", "swh_Latn", steps=150
    )


def publish_and_complete(
    api: RunningApi,
    client: httpx.Client,
    engine_id: str,
    model_dir: Path,
    input_format: InputFormat = "plain",
) -> int:
    """Start a build and play its job: publish `model_dir` as the engine's revision (reading
    `input_format`), report it completed; the revision."""
    assert client.post(f"/translation/engines/{engine_id}/builds", json={}).status_code == 201
    spec = api.launcher.specs[-1]
    manifest = Manifest(
        kind="model-revision",
        engine_id=engine_id,
        revision=spec.revision,
        build_id=spec.build_id,
        source_language="eng_Latn",
        target_language="swh_Latn",
        ctranslate2_version=ctranslate2.__version__,
        quantization="int8",
        input_format=input_format,
    )
    store = open_store((api.service.settings.home / "store").resolve().as_uri())
    publish_folder(store, f"models/{engine_id}/{spec.revision}", model_dir, manifest)
    job = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)
    metadata = (("authorization", f"Bearer {spec.job_token}"),)
    job.BuildStarted(platform_pb2.BuildStartedRequest(build_id=spec.build_id), metadata=metadata)
    job.BuildCompleted(
        platform_pb2.BuildCompletedRequest(build_id=spec.build_id, corpus_size=1, confidence=50.0),
        metadata=metadata,
    )
    return spec.revision


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


@pytest.mark.sqlite_pass_only
def test_hot_swap_under_load_fails_no_request(
    api: RunningApi, tmp_path: Path, tiny_ct2_model: Path, second_model: Path
) -> None:
    old_output, _ = direct_translation(tiny_ct2_model, VERSE)
    new_output, _ = direct_translation(second_model, VERSE)
    assert old_output != new_output, "the two revisions must translate the verse differently"

    assert api.service.services is not None
    _, token = api.run(create_node_token(api.service.services.db, "swap"))
    metrics_port = free_port()
    node = processes.start(
        ["node", "--home", str(tmp_path), "--api-address", api.grpc_target, "--node-id", "swap-node"],
        tmp_path / "node.log",
        {"SERVAL_NODE__TOKEN": token, "SERVAL_NODE__METRICS_PORT": str(metrics_port)},
    )
    client = api.client()
    try:
        engine_id = create_engine(client)["id"]
        first = publish_and_complete(api, client, engine_id, tiny_ct2_model)
        processes.RestClient(api.rest_url, api.api_key()).wait_for_node(node)
        url = f"/translation/engines/{engine_id}/translate"
        warm = client.post(url, json=VERSE, timeout=60)
        assert warm.status_code == 200, warm.text
        assert warm.json()["translation"] == old_output

        stop = threading.Event()
        outcomes: list[list[tuple[int, str, str | None]]] = [[] for _ in range(CLIENTS)]

        def translate_continuously(index: int) -> None:
            with api.client() as own:
                while not stop.is_set():
                    response = own.post(url, json=VERSE, timeout=30)
                    text = (
                        response.json().get("translation", response.text)
                        if response.is_success
                        else response.text
                    )
                    revision = response.headers.get("X-Model-Revision")
                    outcomes[index].append((response.status_code, text, revision))

        threads = [threading.Thread(target=translate_continuously, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            swapped_at = time.monotonic()
            second = publish_and_complete(api, client, engine_id, second_model)
            assert second == first + 1
            deadline = time.monotonic() + 60
            while not all(o and o[-1][1] == new_output for o in outcomes):
                assert time.monotonic() < deadline, "the new revision was never served"
                time.sleep(0.1)
            switch_s = time.monotonic() - swapped_at
            time.sleep(1.0)
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)

        failures = [o for thread in outcomes for o in thread if o[0] != 200]
        assert failures == [], failures[:3]
        revision_of = {old_output: str(first), new_output: str(second)}
        assert all(revision == revision_of[text] for o in outcomes for _, text, revision in o), (
            "X-Model-Revision names the revision that answered"
        )
        for thread_outcomes in outcomes:
            texts = [text for _, text, _ in thread_outcomes]
            assert set(texts) <= {old_output, new_output}
            switch = texts.index(new_output)
            assert texts[switch:] == [new_output] * (len(texts) - switch), (
                "a client went back to the old revision"
            )
        assert any(text == old_output for thread in outcomes for _, text, _ in thread)
        total = sum(len(o) for o in outcomes)
        print(f"{total} requests, switch after {switch_s:.2f} s, no failures")

        deadline = time.monotonic() + 20
        while True:
            scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            if metric(scraped, "serval_node_revisions_loaded") == 1:
                break
            assert time.monotonic() < deadline, "the old revision was never unloaded"
            time.sleep(0.2)
        assert metric(scraped, "serval_node_batch_size_count") > 0
        assert metric(scraped, "serval_node_target_tokens_total") > 0
        assert metric(scraped, "serval_node_model_cache_hits_total") > 0
        log_lines = (tmp_path / "node.log").read_text().splitlines()
        unloads = [line for line in log_lines if "revision unloaded" in line]
        assert [line.split("model=")[-1].split()[0] for line in unloads] == [f"models/{engine_id}/{first}"]
        assert len([line for line in log_lines if "model unloaded" in line]) == 1, (
            "its weights unloaded with it"
        )
    finally:
        client.close()
        code = processes.stop(node)
        print((tmp_path / "node.log").read_text()[-2000:])
    assert code == 0
