"""Serval 1.20's pretranslation confidences against the real API service: the per-row read
(`GET …/parallel-corpora/{id}/confidences`) and the build's `averagePretranslationConfidence` and
`MODEL-0003` diagnostics, from rows a job streams over InsertPretranslations with its token."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serval_api.auth import ALL_SCOPES, CREATE_ENGINES
from serval_api.service.confidences import LOW_CONFIDENCE, summarize
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.test_pretranslations import Job, start_build, text_engine
from tests.conformance.serval_client import NEWER
from tests.conformance.shapes import check

ENGINES = "/translation/engines"


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def row(pc_id: str, ref: str, confidence: float, text_id: str = "MAT") -> dict[str, Any]:
    return {
        "corpusId": pc_id,
        "textId": text_id,
        "sourceRefs": [ref],
        "targetRefs": [ref],
        "translation": f"t {ref}",
        "confidence": confidence,
    }


def confidences(client: httpx.Client, engine_id: str, pc_id: str) -> httpx.Response:
    return client.get(f"{ENGINES}/{engine_id}/parallel-corpora/{pc_id}/confidences")


def build_of(client: httpx.Client, job: Job) -> dict[str, Any]:
    answer = client.get(f"{ENGINES}/{job.engine_id}/builds/{job.build_id}")
    assert answer.status_code == 200, answer.text
    build: dict[str, Any] = answer.json()
    return build


def test_each_pretranslation_of_the_current_model_has_its_confidence(
    api: RunningApi, owner: httpx.Client
) -> None:
    engine_id, pc_id = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    assert confidences(owner, engine_id, pc_id).status_code == 409, "never built: 409, as Serval"
    sent = [row(pc_id, "MAT 1:1", 0.2), row(pc_id, "MAT 1:2", 0.0), row(pc_id, "MAT 1:3", 0.9)]
    job.insert(sent)
    job.completed()

    answer = confidences(owner, engine_id, pc_id)
    assert answer.status_code == 200, answer.text
    assert check(answer.json(), "PretranslationConfidence[]", release=NEWER) == []
    assert answer.json() == [
        {"sourceRefs": ["MAT 1:1"], "targetRefs": ["MAT 1:1"], "confidence": 0.2},
        {"sourceRefs": ["MAT 1:2"], "targetRefs": ["MAT 1:2"], "confidence": -1.0},
        {"sourceRefs": ["MAT 1:3"], "targetRefs": ["MAT 1:3"], "confidence": 0.9},
    ], "in the order sent; a confidence the job did not give (0) reads -1"

    second = start_build(api, owner, engine_id, pc_id)
    second.insert([row(pc_id, "MAT 1:1", 0.7)])
    assert [c["confidence"] for c in confidences(owner, engine_id, pc_id).json()] == [0.2, -1.0, 0.9], (
        "until the next build completes, the current model's"
    )
    second.completed()
    assert confidences(owner, engine_id, pc_id).json() == [
        {"sourceRefs": ["MAT 1:1"], "targetRefs": ["MAT 1:1"], "confidence": 0.7}
    ]


def test_confidences_check_corpus_engine_owner_and_scope(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    job.completed()
    assert confidences(owner, engine_id, pc_id).json() == []
    assert confidences(owner, engine_id, "no-such-corpus").status_code == 404
    assert confidences(owner, engine_id, "x" * 100).status_code == 404
    other_engine, other_pc = text_engine(owner)
    assert confidences(owner, engine_id, other_pc).status_code == 404, "another engine's corpus: 404"
    assert confidences(owner, other_engine, other_pc).status_code == 409
    assert confidences(owner, "no-such-engine", pc_id).status_code == 404
    with api.client("owner-b", ALL_SCOPES) as other:
        assert confidences(other, engine_id, pc_id).status_code == 403
    with api.client(scopes=(CREATE_ENGINES,)) as unscoped:
        assert confidences(unscoped, engine_id, pc_id).status_code == 403
    word_alignment = owner.post(
        "/word-alignment/engines",
        json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"},
    ).json()["id"]
    assert confidences(owner, word_alignment, pc_id).status_code == 404


def test_the_build_records_the_geometric_mean_and_low_books(api: RunningApi, owner: httpx.Client) -> None:
    """As Serval's `InsertPretranslationsAsync`: the geometric mean of the known confidences, and a
    `MODEL-0003` diagnostic for each book of Scripture averaging under 0.25."""
    engine_id, pc_id = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    job.insert(
        [
            row(pc_id, "MAT 1:1", 0.2),
            row(pc_id, "MAT 1:2", 0.2),
            row(pc_id, "MRK 1:1", 0.8, "MRK"),
            row(pc_id, "MRK 1:2", 0.0, "MRK"),  # unknown: left out
            row(pc_id, "NOTES:1", 0.5, "NOTES"),  # no verse: in the average, no book's
        ]
    )
    assert "averagePretranslationConfidence" not in build_of(owner, job)["executionData"]
    job.completed()

    data = build_of(owner, job)["executionData"]
    assert check(data, "ExecutionData", release=NEWER) == []
    assert data["averagePretranslationConfidence"] == pytest.approx((0.2 * 0.2 * 0.8 * 0.5) ** (1 / 4))
    low = [d for d in data["diagnostics"] if d["code"] == "MODEL-0003"]
    assert low == [
        {
            "code": "MODEL-0003",
            "category": "MODEL",
            "severity": "Warn",
            "message": "The average pretranslation model confidence 0.2 in book MAT is unusually low for the "
            "base model tiny-nllb.",
            "data": {
                "averagePretranslationConfidence": pytest.approx(0.2),
                "bookId": "MAT",
                "modelName": "tiny-nllb",
            },
        }
    ]
    assert data["warnings"] == [], "the older client's warnings stay as they were"


def test_a_build_that_pretranslates_nothing_averages_zero(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner, "echo")
    build = wait_for_build(owner, owner.post(f"{ENGINES}/{engine['id']}/builds", json={}).json())
    assert build["state"] == "Completed"
    assert build["executionData"]["averagePretranslationConfidence"] == 0.0


def test_summaries_follow_serval() -> None:
    """Serval's own test numbers (`BuildCompletedAsync_AveragePretranslationConfidence`): the
    geometric mean of 0.25, 0.49, 0.25 and 0.125 is 0.2475…, under the threshold."""
    summary = summarize([(c, [f"MAT 1:{n}"]) for n, c in enumerate([0.25, 0.49, 0.25, 0.125], 1)])
    assert summary.average == pytest.approx(math.exp(sum(map(math.log, [0.25, 0.49, 0.25, 0.125])) / 4))
    assert summary.average < LOW_CONFIDENCE and [b for b, _ in summary.low_books] == ["MAT"]
    assert summarize([]).average == 0.0 and summarize([(0.0, ["MAT 1:1"]), (None, [])]).average == 0.0
    assert summarize([(math.nan, ["MAT 1:1"]), (0.5, [])]).average == pytest.approx(0.5)
