"""Model revisions are immutable and a cancel at any phase leaves a whole state.

A real API service (in process, SQLite or PostgreSQL) and real build jobs run in process against
a real local model store with the tiny model: the job is `build_jobs.job.run_build`, the launcher's
SIGTERM is the `canceled` event it polls, and the launcher's exit report is `platform.job_exited`.
The moment of a cancel or a store failure is chosen by `HookedStore`, the real local store with
one action run when a chosen operation first touches a matching key."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from build_jobs.job import run_build
from serval_api.auth import ALL_SCOPES
from serval_api.service import platform
from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import JobSettings, Settings
from serval_common.store import StoreUnavailable
from serval_common.store.local import LocalStore
from tests.api.conftest import RunningApi, create_engine
from tests.e2e.test_training_build import corpus
from tests.helpers import publish_tiny_base_model, verse_pairs


class HookedStore(LocalStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._hook: tuple[str, str, int, Callable[[], None]] | None = None
        self.touched: list[str] = []
        self.fired = threading.Event()

    def when(self, operation: str, key_part: str, action: Callable[[], None], *, nth: int = 1) -> None:
        """Run `action` before the `nth` `operation` (read, write, upload) on a key holding `key_part`."""
        self._hook = (operation, key_part, nth, action)
        self.touched = []
        self.fired.clear()

    def _touch(self, operation: str, key: str) -> None:
        if self._hook is None or self.fired.is_set():
            return
        wanted, key_part, nth, action = self._hook
        if operation == wanted and key_part in key:
            self.touched.append(key)
            if len(self.touched) == nth:
                self.fired.set()
                action()

    def read_bytes(self, key: str) -> bytes:
        self._touch("read", key)
        return super().read_bytes(key)

    def write_bytes(self, key: str, data: bytes) -> None:
        self._touch("write", key)
        super().write_bytes(key, data)

    def upload_file(self, key: str, source: Path) -> None:
        self._touch("upload", key)
        super().upload_file(key, source)


@dataclass
class Builds:
    api: RunningApi
    client: httpx.Client
    store: HookedStore
    engine_id: str
    settings: Settings
    canceled: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        return f"/translation/engines/{self.engine_id}"

    def start(self, body: dict[str, Any]) -> tuple[dict[str, Any], JobSpec]:
        response = self.client.post(f"{self.base}/builds", json=body)
        assert response.status_code == 201, response.text
        spec = self.api.launcher.specs[-1]
        assert spec.build_id == response.json()["id"]
        self.canceled = threading.Event()
        return response.json(), spec

    def cancel(self) -> None:
        """What the client and the local launcher do: cancel over REST, then SIGTERM the job."""
        response = self.client.post(f"{self.base}/current-build/cancel")
        assert response.status_code == 200 and response.json()["state"] == "Canceled", response.text
        self.canceled.set()

    def run_job(self, spec: JobSpec) -> int:
        """The job to its end, then its exit reported as the launcher reports it."""
        code = run_build(spec, self.settings, self.canceled, store=self.store)
        services = self.api.service.services
        assert services is not None
        self.api.run(platform.job_exited(services, spec.build_id, code, ""))
        return code

    def build(self, build_id: str) -> dict[str, Any]:
        response: dict[str, Any] = self.client.get(f"{self.base}/builds/{build_id}").json()
        return response

    def engine(self) -> dict[str, Any]:
        response: dict[str, Any] = self.client.get(self.base).json()
        return response

    def models(self) -> list[str]:
        """Every object under the engine's `models/` folder."""
        return self.store.list_keys(f"models/{self.engine_id}")

    def pretranslations(self, corpus_id: str) -> httpx.Response:
        return self.client.get(f"{self.base}/parallel-corpora/{corpus_id}/pretranslations")


@pytest.fixture
def builds(api: RunningApi, tiny_ct2_model: Path) -> Iterator[Builds]:
    settings = api.service.settings
    store = HookedStore(Path(settings.resolved_store_url.removeprefix("file://")))
    publish_tiny_base_model(store, tiny_ct2_model, settings.jobs.default_base_model)
    job_settings = Settings(home=settings.home, jobs=JobSettings(report_retry_s=5))
    with api.client(scopes=ALL_SCOPES) as client:
        yield Builds(api, client, store, create_engine(client)["id"], job_settings)


UNTRANSLATED = 8
"""Verses at the end of the parallel corpus whose target is empty: what a build that trains on the
corpus pretranslates."""
VERSES = 120
"""The parallel corpus's source verses: what an inference-only build pretranslates (as Serval,
every segment not in the training data)."""


def parallel_corpus(builds: Builds, verses: int = VERSES) -> str:
    sources, targets = verse_pairs("engwebp", "swh1850", 300 + verses)
    targets = [*targets[300 : 300 + verses - UNTRANSLATED], *[""] * UNTRANSLATED]
    response = builds.client.post(
        f"{builds.base}/parallel-corpora",
        json={
            "sourceCorpusIds": [corpus(builds.client, "en", sources[300:])],
            "targetCorpusIds": [corpus(builds.client, "sw", targets)],
        },
    )
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


def inference_only(corpus_id: str) -> dict[str, Any]:
    return {
        "trainOn": [],
        "pretranslate": [{"parallelCorpusId": corpus_id}],
        "options": {"pretranslateBatchSize": 2},
    }


def training(corpus_id: str, **options: Any) -> dict[str, Any]:
    return {
        "trainOn": [{"parallelCorpusId": corpus_id}],
        "pretranslate": [{"parallelCorpusId": corpus_id}],
        "options": {"maxSteps": 2, "evalShare": 0.05, **options},
    }


def assert_nothing_left(builds: Builds, build_id: str, state: str = "Canceled") -> None:
    build = builds.build(build_id)
    assert build["state"] == state, build
    engine = builds.engine()
    assert (engine["modelRevision"], engine["isBuilding"]) == (0, False)
    assert builds.models() == [], "no partial model folder and no manifest"


def assert_next_build_gets_a_new_revision(builds: Builds, corpus_id: str, burned: int) -> None:
    """The next build is given the revision after the burned one, completes, and serves its own
    pretranslations."""
    build, spec = builds.start(inference_only(corpus_id))
    assert spec.revision == burned + 1, "a failed build's revision is never given again"
    assert builds.run_job(spec) == 0
    done = builds.build(build["id"])
    assert done["state"] == "Completed", done
    assert builds.engine()["modelRevision"] == burned + 1
    manifest = json.loads(builds.store.read_bytes(f"models/{builds.engine_id}/{burned + 1}/manifest.json"))
    assert (manifest["build_id"], manifest["revision"]) == (build["id"], burned + 1)
    assert all(key.startswith(f"models/{builds.engine_id}/{burned + 1}/") for key in builds.models())
    rows = builds.pretranslations(corpus_id)
    assert rows.status_code == 200 and len(rows.json()) == VERSES


def test_cancel_while_queued_burns_the_revision(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(inference_only(corpus_id))
    assert spec.revision == 1
    builds.cancel()
    assert builds.api.launcher.canceled == [build["id"]]
    assert_nothing_left(builds, build["id"])
    assert builds.pretranslations(corpus_id).status_code == 409

    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_a_job_that_runs_after_its_build_was_canceled_leaves_nothing(builds: Builds) -> None:
    """A queued job the launcher could not stop in time (a ClearML task already starting): its
    reports are ignored, and what it publishes is removed when it exits. (With pretranslations
    to send it stops sooner: the API service refuses rows for a finished build.)"""
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start({"trainOn": []})
    builds.client.post(f"{builds.base}/current-build/cancel")
    code = run_build(spec, builds.settings, threading.Event(), store=builds.store)
    assert code == 0 and builds.store.exists(f"models/{builds.engine_id}/1/manifest.json")
    services = builds.api.service.services
    assert services is not None
    builds.api.run(platform.job_exited(services, spec.build_id, code, ""))
    assert_nothing_left(builds, build["id"])
    assert builds.pretranslations(corpus_id).status_code == 409

    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_cancel_while_training(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(training(corpus_id, maxSteps=100_000, timeBudgetS=600))
    with ThreadPoolExecutor(1) as pool:
        job: Future[int] = pool.submit(builds.run_job, spec)
        deadline = time.monotonic() + 120
        while "training step" not in (builds.build(build["id"]).get("message") or ""):
            assert time.monotonic() < deadline and not job.done(), builds.build(build["id"])
            time.sleep(0.1)
        builds.cancel()
        assert job.result(timeout=60) == CANCELED_EXIT_CODE
    assert_nothing_left(builds, build["id"])
    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_cancel_while_pretranslating(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(inference_only(corpus_id))
    builds.store.when("read", f"builds/{build['id']}/pretranslate.src.json", builds.cancel)
    assert builds.run_job(spec) == CANCELED_EXIT_CODE
    assert builds.store.fired.is_set()
    assert_nothing_left(builds, build["id"])
    assert builds.pretranslations(corpus_id).status_code == 409

    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_cancel_while_publishing_files(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(training(corpus_id))
    builds.store.when("upload", f"models/{builds.engine_id}/1/", builds.cancel)
    assert builds.run_job(spec) == CANCELED_EXIT_CODE
    assert builds.store.fired.is_set(), "the job reached publishing"
    assert_nothing_left(builds, build["id"])

    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_cancel_as_the_manifest_is_written_removes_it_when_the_job_exits(builds: Builds) -> None:
    """The cancel lands after the job's last check: the manifest is written and the job's
    completion is ignored; the build stays Canceled and its job's exit removes the folder."""
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(inference_only(corpus_id))
    manifest = f"models/{builds.engine_id}/1/manifest.json"
    builds.store.when("write", manifest, builds.cancel)
    code = run_build(spec, builds.settings, builds.canceled, store=builds.store)
    assert builds.store.fired.is_set() and builds.store.exists(manifest)
    assert builds.build(build["id"])["state"] == "Canceled"
    services = builds.api.service.services
    assert services is not None
    builds.api.run(platform.job_exited(services, spec.build_id, code, ""))
    assert_nothing_left(builds, build["id"])
    assert builds.pretranslations(corpus_id).status_code == 409

    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_a_store_failure_mid_publish_faults_and_leaves_nothing(builds: Builds) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(training(corpus_id))

    def store_fails() -> None:
        raise StoreUnavailable("the model store dropped the connection")

    builds.store.when("upload", f"models/{builds.engine_id}/1/", store_fails, nth=2)
    assert builds.run_job(spec) == 1
    assert builds.store.fired.is_set(), "one file was uploaded before the failure"
    assert "dropped the connection" in builds.build(build["id"])["message"]
    assert_nothing_left(builds, build["id"], state="Faulted")

    assert_next_build_gets_a_new_revision(builds, corpus_id, burned=1)


def test_the_job_refuses_to_publish_into_an_existing_revision_folder(builds: Builds, tmp_path: Path) -> None:
    corpus_id = parallel_corpus(builds)
    build, spec = builds.start(inference_only(corpus_id))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.bin").write_bytes(b"someone else's weights")
    prefix = f"models/{builds.engine_id}/1"
    other = Manifest(kind="model-revision", engine_id=builds.engine_id, revision=1, build_id="another-build")
    publish_folder(builds.store, prefix, tmp_path / "weights", other)
    before = {key: builds.store.read_bytes(key) for key in builds.models()}

    assert builds.run_job(spec) == 1
    faulted = builds.build(build["id"])
    assert faulted["state"] == "Faulted" and "never overwritten" in faulted["message"], faulted
    assert {key: builds.store.read_bytes(key) for key in builds.models()} == before, "left as it was"
    assert builds.engine()["modelRevision"] == 0
    assert builds.pretranslations(corpus_id).status_code == 409
