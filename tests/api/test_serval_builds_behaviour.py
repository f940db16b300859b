"""Serval's build behaviours that SIL's own tools rely on, driven over the real REST API the way
`Serval.Client` calls it: a real API service (in process), real build jobs
(`build_jobs.job.run_build`, as `tests/api/test_build_revisions.py` runs them), a real local model
store with the tiny model and, for read-your-writes, a real inference node process.

- A build with nothing to train on trains nothing and pretranslates with the base model (Serval's
  `TranslationPreprocessBuildJob` writes empty training files and the build goes on); an
  `smt-transfer` build on an engine without corpora builds an empty Thot model.
- Pretranslation scope: every source segment of a `pretranslate` corpus that is not in the
  training data (Serval's `ParallelCorpusService.PreprocessAsync`: no non-empty target segment
  under its key among the texts trained on, of any corpus of the build).
- Read your writes: right after a build reads Completed, translate answers with the new revision.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_api.auth import ALL_SCOPES
from serval_api.service.build_segments import NO_PAIRS
from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_common.jobs import CANCELED_EXIT_CODE
from serval_common.manifest import fetch_folder
from serval_common.settings import JobSettings, Settings
from serval_common.thot_smt import load_engine
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.test_build_export import ENG_MAT, ENG_MRK, SWH_MAT, SWH_MRK, corpus, parallel_corpus, text
from tests.api.test_build_revisions import Builds, HookedStore
from tests.helpers import publish_tiny_base_model

# Real jobs and a node process: the API tests cover the build's database work on both databases.
pytestmark = pytest.mark.sqlite_pass_only


def make_builds(api: RunningApi, client: httpx.Client, engine_type: str) -> Builds:
    settings = api.service.settings
    store = HookedStore(Path(settings.resolved_store_url.removeprefix("file://")))
    job_settings = Settings(home=settings.home, jobs=JobSettings(report_retry_s=5))
    return Builds(api, client, store, create_engine(client, engine_type)["id"], job_settings)


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as client:
        yield client


@pytest.fixture
def nmt(api: RunningApi, owner: httpx.Client, tiny_ct2_model: Path) -> Builds:
    builds = make_builds(api, owner, "nmt")
    publish_tiny_base_model(builds.store, tiny_ct2_model, api.service.settings.jobs.default_base_model)
    return builds


def no_pairs_corpus(builds: Builds) -> str:
    """English MAT 1:1–3 whose Swahili is a different book: not one pair."""
    source = corpus(builds.client, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(builds.client, "sw", {"LUK.txt": text(SWH_MAT)})
    return parallel_corpus(builds.client, builds.engine_id, source, target)


def completed(builds: Builds, body: dict[str, Any]) -> dict[str, Any]:
    build, spec = builds.start(body)
    assert builds.run_job(spec) == 0
    done = builds.build(build["id"])
    assert done["state"] == "Completed", done
    return done


@pytest.mark.timeout(300)
@pytest.mark.parametrize("train_on", ["omitted", "named"])
def test_nothing_to_train_on_pretranslates_with_the_base_model(nmt: Builds, train_on: str) -> None:
    pc_id = no_pairs_corpus(nmt)
    body: dict[str, Any] = {"pretranslate": [{"parallelCorpusId": pc_id}]}
    if train_on == "named":
        body["trainOn"] = [{"parallelCorpusId": pc_id}]
    build, spec = nmt.start(body)
    assert spec.train is False, "nothing to train on: the job takes the base model"
    assert build["executionData"]["trainCount"] == 0
    assert build["executionData"]["warnings"] == [NO_PAIRS]

    assert nmt.run_job(spec) == 0
    done = nmt.build(build["id"])
    assert done["state"] == "Completed", done
    assert "the base model's weights" in done["message"]
    assert nmt.engine()["modelRevision"] == 1
    rows = nmt.pretranslations(pc_id)
    assert rows.status_code == 200, rows.text
    assert [row["sourceRefs"] for row in rows.json()] == [[f"MAT:{n}"] for n in (1, 2, 3)]
    assert all(row["translation"].strip() for row in rows.json())


@pytest.mark.timeout(300)
def test_an_smt_build_without_training_data_builds_an_empty_model(
    api: RunningApi, owner: httpx.Client, tmp_path: Path
) -> None:
    """As Thot with no data: the model translates each word as itself."""
    smt = make_builds(api, owner, "smt-transfer")
    pc_id = no_pairs_corpus(smt)
    done = completed(smt, {"pretranslate": [{"parallelCorpusId": pc_id}]})
    assert smt.engine()["modelRevision"] == 1
    rows = smt.pretranslations(pc_id).json()
    assert [row["translation"].lower() for row in rows] == [verse.lower() for verse in ENG_MAT], (
        "unknown words stay as they are (lowercased: the model learned no casing)"
    )
    assert done["executionData"]["trainCount"] == 0

    _, folder = fetch_folder(smt.store, f"models/{smt.engine_id}/1", tmp_path / "cache")
    model = load_engine(folder)
    try:
        assert list(model.translate("the word").target_tokens) == ["the", "word"]
    finally:
        model.close()


@pytest.mark.timeout(300)
def test_an_smt_build_on_an_engine_without_corpora_completes_and_cancels(
    api: RunningApi, owner: httpx.Client
) -> None:
    smt = make_builds(api, owner, "smt-transfer")
    completed(smt, {})
    assert smt.engine()["modelRevision"] == 1

    pending, spec = smt.start({})
    smt.cancel()
    assert smt.build(pending["id"])["state"] == "Canceled"
    assert smt.run_job(spec) == CANCELED_EXIT_CODE

    active, spec = smt.start({})
    smt.store.when("upload", f"models/{smt.engine_id}/{spec.revision}/", smt.cancel)
    assert smt.run_job(spec) == CANCELED_EXIT_CODE
    assert smt.store.fired.is_set(), "canceled while Active, publishing"
    assert smt.build(active["id"])["state"] == "Canceled"
    assert smt.engine()["modelRevision"] == 1


def scope_engine(builds: Builds) -> tuple[str, str, str, str]:
    """Parallel corpus A: MAT 1:1–3, the Swahili of 1:1 only; B: MRK 1:1–2 with both Swahili
    verses (another text: no key of A); C: MAT again, its Swahili 1:2 only. (source, A, B, C)"""
    client, engine_id = builds.client, builds.engine_id
    source = corpus(client, "en", {"MAT.txt": text(ENG_MAT)})
    a = parallel_corpus(client, engine_id, source, corpus(client, "sw", {"MAT.txt": text([SWH_MAT[0]])}))
    mrk = corpus(client, "en", {"MRK.txt": text(ENG_MRK)})
    b = parallel_corpus(client, engine_id, mrk, corpus(client, "sw", {"MRK.txt": text(SWH_MRK)}))
    c = parallel_corpus(client, engine_id, source, corpus(client, "sw", {"MAT.txt": text(["", SWH_MAT[1]])}))
    return source, a, b, c


SCOPES = [
    ("trained on everything: only what no corpus has a target for", None, ["MAT:3"]),
    ("trained on itself: only what has no target", ["A"], ["MAT:2", "MAT:3"]),
    ("trained on nothing: every segment", [], ["MAT:1", "MAT:2", "MAT:3"]),
    ("trained on another text only: every segment", ["B"], ["MAT:1", "MAT:2", "MAT:3"]),
    ("another corpus's training target counts: by key", ["C"], ["MAT:1", "MAT:3"]),
]


def entries(names: list[str] | None, ids: dict[str, str]) -> list[dict[str, str]] | None:
    return None if names is None else [{"parallelCorpusId": ids[name]} for name in names]


@pytest.mark.parametrize(("case", "train_on", "expected"), SCOPES, ids=[case for case, _, _ in SCOPES])
def test_echo_pretranslates_what_is_not_in_the_training_data(
    api: RunningApi, owner: httpx.Client, case: str, train_on: list[str] | None, expected: list[str]
) -> None:
    echo = make_builds(api, owner, "echo")
    _, a, b, c = scope_engine(echo)
    body: dict[str, Any] = {"pretranslate": [{"parallelCorpusId": a}]}
    if train_on is not None:
        body["trainOn"] = entries(train_on, {"A": a, "B": b, "C": c})
    response = owner.post(f"{echo.base}/builds", json=body)
    assert response.status_code == 201, response.text
    assert wait_for_build(owner, response.json())["state"] == "Completed"
    rows = echo.pretranslations(a).json()
    assert [(row["sourceRefs"][0], row["translation"]) for row in rows] == [
        (ref, ENG_MAT[int(ref[-1]) - 1]) for ref in expected
    ], case


@pytest.mark.timeout(300)
def test_nmt_and_smt_jobs_pretranslate_what_is_not_in_the_training_data(
    api: RunningApi, owner: httpx.Client, nmt: Builds
) -> None:
    """The job translates what the export chose: for nmt an inference-only build over a corpus
    with target text, for smt-transfer a build trained on another corpus's pairs."""
    _, a, _, _ = scope_engine(nmt)
    completed(nmt, {"trainOn": [], "pretranslate": [{"parallelCorpusId": a}]})
    rows = nmt.pretranslations(a).json()
    assert [row["sourceRefs"] for row in rows] == [["MAT:1"], ["MAT:2"], ["MAT:3"]]

    smt = make_builds(api, owner, "smt-transfer")
    _, a, b, _ = scope_engine(smt)
    build, spec = smt.start({"trainOn": [{"parallelCorpusId": b}], "pretranslate": [{"parallelCorpusId": a}]})
    exported = json.loads(smt.store.read_bytes(f"builds/{build['id']}/pretranslate.src.json"))
    assert [row["sourceRefs"] for row in exported] == [["MAT:1"], ["MAT:2"], ["MAT:3"]]
    assert spec.train is True
    assert smt.run_job(spec) == 0
    assert [row["sourceRefs"] for row in smt.pretranslations(a).json()] == [["MAT:1"], ["MAT:2"], ["MAT:3"]]


def test_a_completion_with_no_node_connected_does_not_wait(api: RunningApi) -> None:
    """No node serves the engine: nothing to wait for (its first translate loads the revision)."""
    services = api.service.services
    assert services is not None
    assert api.run(services.dispatcher.prefetch("e" * 24, 2, timeout_s=3600)) is True


@pytest.mark.timeout(300)
def test_translate_right_after_completed_answers_with_the_new_revision(
    api: RunningApi, nmt: Builds, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    verse = ENG_MAT[0]
    translate = f"{nmt.base}/translate"
    completed(nmt, {"trainOn": []})
    services = api.service.services
    assert services is not None
    _, token = api.run(create_node_token(services.db, "read-your-writes"))
    node = processes.start(
        ["node", "--home", str(tmp_path), "--api-address", api.grpc_target, "--node-id", "ryw-node"],
        tmp_path / "node.log",
        {"SERVAL_NODE__TOKEN": token},
    )
    try:
        processes.RestClient(api.rest_url, api.api_key()).wait_for_node(node)
        first = nmt.client.post(translate, json=verse, timeout=60)
        assert first.status_code == 200, first.text
        assert first.headers["X-Model-Revision"] == "1"

        caplog.set_level(logging.INFO, logger="serval_api.routing.placement")
        build, spec = nmt.start({"trainOn": []})
        job = threading.Thread(target=nmt.run_job, args=(spec,))
        job.start()
        try:
            seen = build
            while seen["state"] != "Completed":
                assert seen["state"] in ("Pending", "Active"), seen
                poll = nmt.client.get(
                    f"{nmt.base}/builds/{build['id']}",
                    params={"min-revision": seen["revision"] + 1},
                    timeout=60,
                )
                assert poll.status_code in (200, 408), poll.text
                if poll.status_code == 200:
                    seen = poll.json()
            answer = nmt.client.post(translate, json=verse, timeout=60)
        finally:
            job.join(120)
        assert answer.status_code == 200, answer.text
        assert nmt.engine()["modelRevision"] == 2
        assert answer.headers["X-Model-Revision"] == "2", "the new model answers once the build is Completed"
        prefetched = [
            r
            for r in caplog.records
            if r.getMessage() == "asked node to load model" and r.__dict__.get("why")
        ]
        assert [r.__dict__["why"] for r in prefetched][-1:] == ["build completing"], (
            "the node was asked to load the new revision before the build was marked Completed"
        )
    finally:
        code = processes.stop(node)
        print((tmp_path / "node.log").read_text()[-2000:])
    assert code == 0
