"""`smt-transfer` builds end to end: a real API service (in process), the real build job
(`build_jobs.job.run_build`) training a Thot model on 300 English→Swahili verse pairs, a real
local model store, pretranslations, and a cancel during training."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serval_api.auth import ALL_SCOPES
from serval_common.jobs import CANCELED_EXIT_CODE
from serval_common.manifest import fetch_folder, sha256_file
from serval_common.settings import JobSettings, Settings
from serval_common.thot_smt import load_engine
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_build_revisions import UNTRANSLATED, Builds, HookedStore, assert_nothing_left
from tests.e2e.test_training_build import corpus
from tests.helpers import verse_pairs

PAIRS = 300

# Training, not storage: the API tests cover the build's database work on both databases.
pytestmark = pytest.mark.sqlite_pass_only


@pytest.fixture
def builds(api: RunningApi) -> Iterator[Builds]:
    settings = api.service.settings
    store = HookedStore(Path(settings.resolved_store_url.removeprefix("file://")))
    job_settings = Settings(home=settings.home, jobs=JobSettings(report_retry_s=5))
    with api.client(scopes=ALL_SCOPES) as client:
        engine = create_engine(client, "smt-transfer")
        yield Builds(api, client, store, engine["id"], job_settings)


def parallel_corpus(builds: Builds) -> str:
    sources, targets = verse_pairs("engwebp", "swh1850", PAIRS + UNTRANSLATED)
    targets = [*targets[:PAIRS], *[""] * UNTRANSLATED]
    response = builds.client.post(
        f"{builds.base}/parallel-corpora",
        json={
            "sourceCorpusIds": [corpus(builds.client, "en", sources)],
            "targetCorpusIds": [corpus(builds.client, "sw", targets)],
        },
    )
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


def training(corpus_id: str, **options: Any) -> dict[str, Any]:
    return {
        "trainOn": [{"parallelCorpusId": corpus_id}],
        "pretranslate": [{"parallelCorpusId": corpus_id}],
        "options": {"evalShare": 0.05, **options},
    }


@pytest.mark.timeout(300)
def test_an_smt_build_trains_pretranslates_and_publishes_a_thot_revision(
    builds: Builds, tmp_path: Path
) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(training(corpus_id, tuningEvaluations=3, maxTuningPairs=10))
    assert spec.engine_type == "smt-transfer"

    assert builds.run_job(spec) == 0

    done = builds.build(build["id"])
    assert done["state"] == "Completed", done
    assert [(p["stage"], p["stepCount"]) for p in done["phases"]] == [
        ("Train", 100),
        ("Inference", UNTRANSLATED),
    ]
    assert (
        done["message"].startswith("published revision 1: trained a Thot phrase-based model on 285 pairs")
        and "(3 tuning evaluations)" in done["message"]
    )
    assert done["executionData"]["trainCount"] == PAIRS, "the pairs held out to score it count, as in Serval"
    engine = builds.engine()
    assert engine["modelRevision"] == 1
    assert engine["corpusSize"] == PAIRS

    prefix = f"models/{builds.engine_id}/1"
    manifest = json.loads(builds.store.read_bytes(f"{prefix}/manifest.json"))
    assert (manifest["kind"], manifest["backend"], manifest["build_id"]) == (
        "model-revision",
        "thot-smt",
        build["id"],
    )
    assert engine["confidence"] == pytest.approx(manifest["scores"]["chrf"])
    assert 5 < manifest["scores"]["chrf"] < 100
    assert manifest["training"]["tuning_evaluations"] == 3
    paths = {f["path"] for f in manifest["files"]}
    assert {"smt.json", "smt.cfg", "truecase.txt", "tm/src_trg.ttable", "lm/trg.lm"} <= paths
    assert not [p for p in paths if p.endswith((".A3.final", ".bestal"))], "training by-products stay out"
    assert set(builds.models()) == {f"{prefix}/{p}" for p in paths} | {f"{prefix}/manifest.json"}

    _, folder = fetch_folder(builds.store, prefix, tmp_path / "cache")
    for entry in manifest["files"]:
        assert sha256_file(folder / entry["path"]) == entry["sha256"]
    config = (folder / "smt.cfg").read_text().splitlines()
    assert "-tm tm/src_trg" in config and "-lm lm/trg.lm" in config, "paths relative to the folder"
    engine_model = load_engine(folder)
    try:
        assert engine_model.translate("Jesus wept.").translation.strip()
    finally:
        engine_model.close()

    rows = builds.pretranslations(corpus_id)
    assert rows.status_code == 200, rows.text
    assert len(rows.json()) == UNTRANSLATED
    assert all(row["translation"].strip() for row in rows.json())


@pytest.mark.timeout(300)
def test_cancel_while_training_leaves_nothing(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(training(corpus_id))
    builds.store.when("read", f"builds/{build['id']}/train.trg.txt", builds.cancel)

    assert builds.run_job(spec) == CANCELED_EXIT_CODE

    assert builds.store.fired.is_set()
    assert_nothing_left(builds, build["id"])


def test_bad_smt_options_fault_the_build_with_a_clear_message(builds: Builds) -> None:
    """The API service refuses them when the build starts; a job handed them anyway checks them
    again."""
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(training(corpus_id))
    spec = dataclasses.replace(spec, options_json=json.dumps({"tuningEvaluations": -1}))

    assert builds.run_job(spec) == 1

    faulted = builds.build(build["id"])
    assert faulted["state"] == "Faulted"
    assert "tuningEvaluations" in faulted["message"]
    assert builds.models() == []
