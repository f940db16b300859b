"""Pretranslation through the real API service and build job: an inference-only build with
`pretranslate` translates the source segments the target lacks, and clients read them over REST."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import Deployment, wait_for_build
from tests.e2e.test_training_build import corpus
from tests.helpers import verse_pairs


def test_an_inference_only_build_serves_pretranslations(deployment: Deployment) -> None:
    rest = deployment.rest
    sources, targets = verse_pairs("engwebp", "swh1850", 6)
    engine = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    ).json()
    pc = rest.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={
            "sourceCorpusIds": [corpus(rest, "en", sources)],
            "targetCorpusIds": [corpus(rest, "sw", [*targets[:3], "", "", ""])],
        },
    )
    assert pc.status_code == 201, pc.text
    pc_id = pc.json()["id"]
    url = f"/translation/engines/{engine['id']}/parallel-corpora/{pc_id}/pretranslations"
    assert rest.get(url).status_code == 409, "no completed build yet"

    response = rest.post(
        f"/translation/engines/{engine['id']}/builds",
        json={
            "trainOn": [],
            "pretranslate": [{"parallelCorpusId": pc_id}],
            "options": {"pretranslateBatchSize": 2},
        },
    )
    assert response.status_code == 201, response.text
    build: dict[str, Any] = wait_for_build(rest, engine["id"], response.json(), timeout_s=120)
    assert build["state"] == "Completed", build

    served = rest.get(url)
    assert served.status_code == 200, served.text
    rows = served.json()
    assert [(row["textId"], row["sourceRefs"], row["targetRefs"]) for row in rows] == [
        ("NT", [f"NT:{n}"], [f"NT:{n}"]) for n in (4, 5, 6)
    ], "the verses the target lacks, in source order"
    assert all(row["translation"].strip() and row["refs"] == row["targetRefs"] for row in rows)

    written = json.loads(
        (deployment.home / "store" / "builds" / build["id"] / "pretranslate.trg.json").read_text()
    )
    assert [row["translation"] for row in written] == [row["translation"] for row in rows]
    assert all(0.0 < row["confidence"] <= 1.0 for row in written)
