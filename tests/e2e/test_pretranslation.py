"""Pretranslation through the real API service and build job: an inference-only build with
`pretranslate` translates every source segment (none is in the training data), and clients read them
over REST."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import sqlalchemy

from tests.e2e.conftest import Deployment, wait_for_build
from tests.e2e.test_training_build import corpus
from tests.helpers import verse_pairs
from tests.paratext import book_usfm, ebible_verses, project_zip


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
        ("NT", [f"NT:{n}"], [f"NT:{n}"]) for n in range(1, 7)
    ], "an inference-only build trains on nothing: every verse, in source order (as Serval)"
    assert all(row["translation"].strip() and row["refs"] == row["targetRefs"] for row in rows)

    written = json.loads(
        (deployment.home / "store" / "builds" / build["id"] / "pretranslate.trg.json").read_text()
    )
    assert [row["translation"] for row in written] == [row["translation"] for row in rows]
    assert all(0.0 < row["confidence"] <= 1.0 for row in written)


def paratext_corpus(rest: httpx.Client, language: str, data: bytes) -> str:
    upload = rest.post(
        "/files", data={"format": "Paratext", "name": f"{language}.zip"}, files={"file": ("p.zip", data)}
    )
    assert upload.status_code == 201, upload.text
    response = rest.post("/corpora", json={"language": language, "files": [{"fileId": upload.json()["id"]}]})
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


@pytest.mark.sqlite_pass_only
def test_the_build_job_reports_the_target_quote_convention(
    deployment: Deployment, e2e_database_url: str
) -> None:
    """The real job fine-tunes on the verse pairs of two Paratext projects, pretranslates the
    chapter the target lacks, detects the convention of the target project (Swahili with “ ” and
    ‘ ’) and reports it with its per-corpus analysis; the USFM endpoint then serves the target's
    book, its existing verses kept and the missing chapter filled."""
    rest = deployment.rest
    english = ebible_verses("engwebp", "MAT", (1, 2, 3))
    swahili = ebible_verses("swh1850", "MAT", (1, 3))
    target = {ref: swahili.get(ref, "") for ref in english if ref in swahili or ref[0] == 2}
    engine = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    ).json()
    pc = rest.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={
            "sourceCorpusIds": [
                paratext_corpus(rest, "en", project_zip("SRC", "en", {"MAT": book_usfm("MAT", english)}))
            ],
            "targetCorpusIds": [
                paratext_corpus(rest, "sw", project_zip("TRG", "sw", {"MAT": book_usfm("MAT", target)}))
            ],
        },
    ).json()
    response = rest.post(
        f"/translation/engines/{engine['id']}/builds",
        json={
            "trainOn": [{"parallelCorpusId": pc["id"]}],
            "pretranslate": [{"parallelCorpusId": pc["id"]}],
            "options": {"pretranslateBatchSize": 8, "maxSteps": 10},
        },
    )
    assert response.status_code == 201, response.text
    build: dict[str, Any] = wait_for_build(rest, engine["id"], response.json(), timeout_s=180)
    assert build["state"] == "Completed", build
    pairs = sum(1 for ref in english if target.get(ref))
    assert 0 < build["executionData"]["trainCount"] <= pairs, "trained on the verses both projects hold"
    assert build["targetQuoteConvention"] == "standard_english" and build["canDenormalizeQuotes"] is True

    with sqlalchemy.create_engine(e2e_database_url).connect() as db:
        convention, analysis = db.execute(
            sqlalchemy.text("SELECT target_quote_convention, analysis FROM builds WHERE id = :id"),
            {"id": build["id"]},
        ).one()
    assert convention == "standard_english"
    analysis = json.loads(analysis) if isinstance(analysis, str) else analysis
    assert analysis == [
        {
            "parallelCorpusRef": pc["id"],
            "targetQuoteConvention": "standard_english",
            "canDenormalizeQuotes": True,
        }
    ]
    usfm = rest.get(
        f"/translation/engines/{engine['id']}/parallel-corpora/{pc['id']}/pretranslations/MAT/usfm"
    )
    assert usfm.status_code == 200, usfm.text
    assert swahili[(3, 2)] in usfm.text, "Auto: the target's book, its existing verses kept"
    pretranslated = rest.get(
        f"/translation/engines/{engine['id']}/parallel-corpora/{pc['id']}/pretranslations/MAT"
    ).json()
    assert {tuple(row["targetRefs"]) for row in pretranslated} == {
        (f"MAT 2:{verse}",) for chapter, verse in english if chapter == 2
    }
    as_written = rest.get(
        f"/translation/engines/{engine['id']}/parallel-corpora/{pc['id']}/pretranslations/MAT/usfm",
        params={"quotation-mark-behavior": "Normalized"},
    )
    assert all(row["translation"].strip() in as_written.text for row in pretranslated), "chapter 2 filled"
