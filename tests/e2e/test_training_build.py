"""A training build through the real API service, build job and inference node: upload texts,
build with trainOn, and translate from the fine-tuned revision."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Deployment, admin_key, wait_for_build
from tests.helpers import verse_pairs, wait_until

VERSE = "Blessed are the peacemakers, for they shall be called children of God."


def corpus(rest: httpx.Client, language: str, lines: list[str]) -> str:
    data = "".join(f"{line}\n" for line in lines).encode()
    upload = rest.post("/files", data={"format": "Text", "name": "NT.txt"}, files={"file": ("NT.txt", data)})
    assert upload.status_code == 201, upload.text
    response = rest.post("/corpora", json={"language": language, "files": [{"fileId": upload.json()["id"]}]})
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


@pytest.mark.sqlite_pass_only
def test_training_build_serves_the_fine_tuned_revision(deployment: Deployment) -> None:
    rest = deployment.rest
    sources, targets = verse_pairs("engwebp", "swh1850", 500)
    sources, targets = sources[300:], targets[300:]
    engine = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    ).json()
    pc = rest.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={
            "sourceCorpusIds": [corpus(rest, "en", sources)],
            "targetCorpusIds": [corpus(rest, "sw", targets)],
        },
    )
    assert pc.status_code == 201, pc.text
    response = rest.post(
        f"/translation/engines/{engine['id']}/builds",
        json={"trainOn": [{"parallelCorpusId": pc.json()["id"]}], "options": {"maxSteps": 60}},
    )
    assert response.status_code == 201, response.text
    build: dict[str, Any] = response.json()
    build = wait_for_build(rest, engine["id"], build, timeout_s=300)
    assert build["state"] == "Completed", build
    assert build["message"].startswith("published revision 1: trained 60 steps"), build["message"]
    assert "chrF" in build["message"] and "190 training pairs, 10 held out" in build["message"]
    (train,) = build["phases"]
    assert (train["stage"], train["step"], train["stepCount"]) == ("Train", 60, 60) and train["started"]
    data = build["executionData"]
    assert (data["trainCount"], data["resolvedSourceLanguage"], data["resolvedTargetLanguage"]) == (
        190,
        "eng_Latn",
        "swh_Latn",
    )
    assert data["engineSourceLanguageTag"] == "en", "what the API service recorded stays"

    current = rest.get(f"/translation/engines/{engine['id']}").json()
    assert current["modelRevision"] == 1
    assert current["corpusSize"] == 190, "200 pairs less the 5% held out"
    manifest = json.loads(
        (deployment.home / "store" / "models" / engine["id"] / "1" / "manifest.json").read_text()
    )
    assert manifest["weights_from"] is None and manifest["build_id"] == build["id"]
    assert {"chrf_before", "chrf_after"} <= set(manifest["scores"])
    assert manifest["training"]["steps"] == 60 and manifest["training"]["steps_per_second"] > 0
    assert manifest["max_positions"] == 256
    assert current["confidence"] == manifest["scores"]["chrf_after"]

    translated = rest.post(f"/translation/engines/{engine['id']}/translate", json=VERSE)
    assert translated.status_code == 200, translated.text
    assert translated.json()["translation"].strip()
    assert manifest["input_format"] == "fuzzy-match", "fine-tunes read fuzzy matches by default"

    micro_build_continues_the_revision(deployment, engine["id"], sources[:11], targets[:11])


def node_model(deployment: Deployment, engine_id: str, revision: int) -> dict[str, Any]:
    """The node's view of the engine's revision, as the admin API reports it ({} when none holds it)."""
    key = admin_key(deployment.database_url)
    nodes = deployment.rest.get("/admin/nodes", headers={"X-API-Key": key}).json()
    for node in nodes:
        for model in node["models"]:
            if model["engineId"] == engine_id and model["revision"] == revision:
                return dict(model)
    return {}


def micro_build_continues_the_revision(
    deployment: Deployment, engine_id: str, sources: list[str], targets: list[str]
) -> None:
    """Ten confirmed verses (`learning.micro_build_pairs`) start a micro-build of revision 1; the
    verse confirmed while it runs is replayed into the revision it publishes, which serves."""
    rest = deployment.rest

    def confirm(source: str, target: str) -> None:
        answer = rest.post(
            f"/translation/engines/{engine_id}/train-segment",
            json={"sourceSegment": source, "targetSegment": target, "sentenceStart": True},
        )
        assert answer.status_code == 200, answer.text

    def micro_builds() -> list[dict[str, Any]]:
        builds = rest.get(f"/translation/engines/{engine_id}/builds").json()
        return [b for b in builds if b.get("name") == "micro-build"]

    for source, target in zip(sources[:10], targets[:10], strict=True):
        confirm(source, target)
    wait_until(micro_builds, 30, "the micro-build started")
    confirm(sources[10], targets[10])
    learned = node_model(deployment, engine_id, 1)["trainedThrough"]
    [micro] = micro_builds()
    assert micro["state"] in ("Pending", "Active"), "the eleventh verse was confirmed while it ran"
    micro = wait_for_build(rest, engine_id, micro, timeout_s=300)
    assert micro["state"] == "Completed", micro
    assert micro["message"].startswith("published revision 2: micro-build of revision 1, 10 new pairs"), micro
    assert rest.get(f"/translation/engines/{engine_id}").json()["modelRevision"] == 2
    manifest = json.loads(
        (deployment.home / "store" / "models" / engine_id / "2" / "manifest.json").read_text()
    )
    assert manifest["training"]["micro_build_of"] == 1 and manifest["input_format"] == "fuzzy-match"
    translated = rest.post(f"/translation/engines/{engine_id}/translate", json=VERSE)
    assert translated.status_code == 200 and translated.headers["X-Model-Revision"] == "2", translated.text
    assert node_model(deployment, engine_id, 2)["trainedThrough"] == learned, (
        "the pair confirmed meanwhile replayed"
    )


@pytest.mark.sqlite_pass_only
def test_a_build_to_kiche_adds_its_code_and_serves(deployment: Deployment) -> None:
    rest = deployment.rest
    sources, targets = verse_pairs("engwebp", "quctt", 200)
    engine = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "quc", "type": "nmt"}
    ).json()
    language = rest.get("/translation/engine-types/nmt/languages/quc").json()
    assert (language["internalCode"], language["isNative"]) == ("quc_Latn", False)
    pc = rest.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={
            "sourceCorpusIds": [corpus(rest, "en", sources)],
            "targetCorpusIds": [corpus(rest, "quc", targets)],
        },
    ).json()
    build = rest.post(
        f"/translation/engines/{engine['id']}/builds",
        json={"trainOn": [{"parallelCorpusId": pc["id"]}], "options": {"maxSteps": 30}},
    ).json()
    build = wait_for_build(rest, engine["id"], build, timeout_s=300)
    assert build["state"] == "Completed", build
    manifest = json.loads(
        (deployment.home / "store" / "models" / engine["id"] / "1" / "manifest.json").read_text()
    )
    assert manifest["added_language_codes"] == ["quc_Latn"]

    translated = rest.post(f"/translation/engines/{engine['id']}/translate", json=VERSE)
    assert translated.status_code == 200, translated.text
    assert translated.json()["targetTokens"]
