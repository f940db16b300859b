"""Serval's `Smt` workflow (`Serval.E2ETests/ServalApiTests.cs`) with a real inference node process
and the real build job: an smt-transfer engine built three times, with pairs trained between the
builds and while a build runs. Once a build reads Completed, the first translate is answered by
the revision it published (`X-Model-Revision`), and that revision has every pair trained before it:
those trained before the build by training on them, those trained while it ran by replay as the
node loads it, before the build is marked Completed (issue 35)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serval_api.auth import ALL_SCOPES
from serval_api.builds.local import job_environment
from serval_cli import processes
from tests.api.conftest import RunningApi
from tests.conformance.test_serval_client import family_unavailable, start_node
from tests.e2e.test_training_build import corpus
from tests.helpers import unavailable, verse_pairs, wait_until

pytestmark = pytest.mark.sqlite_pass_only  # a real node and three real build jobs: once is enough

PAIRS_PER_BUILD = 60
TRAINED = [
    ("Jesus wept.", "Yesu akalia machozi."),
    ("Rejoice always.", "Furahini siku zote."),
    ("Pray without ceasing.", "Ombeni bila kukoma."),
]
"""Short pairs the engine never saw in its corpora, trained live as a translator confirms them
between builds."""
DURING = [
    ("Jesus wept again.", "Yesu akalia machozi tena."),
    ("Rejoice with me.", "Furahini pamoja nami."),
    ("Pray for us.", "Tuombeeni sisi."),
]
"""Pairs trained while each build runs, after its corpora were exported."""


@pytest.fixture
def node(api: RunningApi, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    reason = family_unavailable("smt-transfer")
    if reason is not None:
        unavailable(reason)
    process = start_node(api, tmp_path / "node")
    try:
        yield process
    finally:
        processes.stop(process)


def run_job(api: RunningApi) -> None:
    """The newest build's job, as the local launcher runs it, reporting over the platform API."""
    spec = dataclasses.replace(api.launcher.specs[-1], api_address=api.grpc_target)
    job = subprocess.run(
        [sys.executable, "-m", "build_jobs", *spec.command_args()],
        env=job_environment(api.service.settings, spec),
        capture_output=True,
        timeout=300,
    )
    assert job.returncode == 0, job.stderr.decode(errors="replace")[-3000:]


def test_each_rebuild_is_served_by_the_first_translate_after_completed_with_every_pair_kept(
    api: RunningApi, node: subprocess.Popen[bytes]
) -> None:
    sources, targets = verse_pairs("engwebp", "swh1850", 3 * PAIRS_PER_BUILD)
    with api.client(scopes=ALL_SCOPES) as client:
        engine = client.post(
            "/translation/engines",
            json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "smt-transfer"},
        ).json()
        base = f"/translation/engines/{engine['id']}"

        def translate(segment: str) -> tuple[str, int]:
            response = client.post(f"{base}/translate", json=segment, timeout=60)
            assert response.status_code == 200, response.text
            return response.json()["translation"], int(response.headers["X-Model-Revision"])

        def learned(source: str, target: str) -> int:
            """The revision that answered, which translates `source` as `target` (the first word's
            case is the truecaser's, as Serval answers without `capitalizeSentenceStart`)."""
            translation, revision = translate(source)
            assert translation.casefold() == target.casefold(), (source, translation, target)
            return revision

        def train(source: str, target: str) -> None:
            pair = {"sourceSegment": source, "targetSegment": target, "sentenceStart": True}
            response = client.post(f"{base}/train-segment", json=pair, timeout=60)
            assert response.status_code == 200, response.text

        def add_corpus(part: int) -> None:
            chunk = slice(part * PAIRS_PER_BUILD, (part + 1) * PAIRS_PER_BUILD)
            response = client.post(
                f"{base}/parallel-corpora",
                json={
                    "sourceCorpusIds": [corpus(client, "en", sources[chunk])],
                    "targetCorpusIds": [corpus(client, "sw", targets[chunk])],
                },
            )
            assert response.status_code == 201, response.text

        def start_build() -> dict[str, Any]:
            response = client.post(f"{base}/builds", json={})
            assert response.status_code == 201, response.text
            build: dict[str, Any] = response.json()
            return build

        def completed(build: dict[str, Any]) -> None:
            run_job(api)
            done = client.get(f"{base}/builds/{build['id']}").json()
            assert done["state"] == "Completed", done

        add_corpus(0)
        completed(start_build())
        first = client.get(base).json()["modelRevision"]
        wait_until(
            lambda: client.post(f"{base}/translate", json="Amen.", timeout=60).status_code == 200,
            90,
            "the node serves the first revision",
        )
        assert translate("Amen.")[1] == first

        for round_, ((source, target), during) in enumerate(zip(TRAINED, DURING, strict=True)):
            train(source, target)
            learned(source, target)  # the loaded model learns the pair at once
            if round_ < 2:
                add_corpus(round_ + 1)
            build = start_build()
            # Trained after the build's corpora were exported: its revision learns it by replay.
            train(*during)
            completed(build)
            revision = client.get(base).json()["modelRevision"]
            assert revision == first + round_ + 1
            corpora = PAIRS_PER_BUILD * min(round_ + 2, 3)
            trained_before = 2 * round_ + 1
            assert client.get(base).json()["corpusSize"] == corpora + trained_before + 1, (
                "every pair it learned from, held-out ones included (Serval's 133 in its Smt test), "
                "and the pair trained while it ran"
            )
            # The first translate after Completed: the new revision, the pair trained while it ran
            # replayed into it.
            served_by = learned(*during)
            assert served_by == revision, (
                f"build {round_ + 2} read Completed, but revision {served_by} answered"
            )
            for earlier in [*TRAINED[: round_ + 1], *DURING[:round_]]:
                assert learned(*earlier) == revision, "every earlier pair is kept"
