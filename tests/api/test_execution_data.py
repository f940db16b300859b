"""Serval 1.20's execution data against the real API service, computed from real Paratext projects
and Text files: verse counts (book → chapter → verses) and chapter filters of what a build trains
on, pretranslates and aligns; the build's warnings and problems as structured diagnostics (the
export's, Serval's checks of an NMT build, a job's warnings, a fault), capped as Serval caps them;
`TranslationBuildConfig.model`; `isModelPersisted` of word-alignment engines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval.translation.v1 import platform_pb2
from serval_api.auth import ALL_SCOPES
from serval_api.db.models.build_record import ExecutionData
from serval_api.service import diagnostics
from serval_api.service.build_recovery import MAX_RESTARTS, recover_builds
from serval_api.service.build_segments import NO_PAIRS
from serval_api.service.verse_counts import verse_count, verse_of
from serval_common.manifest import Manifest, publish_folder
from serval_common.store import store_from_settings
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_build_export import ENG_MAT, SWH_MAT, corpus, parallel_corpus, text, upload
from tests.api.test_platform_api import as_job, job_stub
from tests.conformance.serval_client import NEWER
from tests.conformance.shapes import check
from tests.paratext import book_usfm, ebible_verses, project_zip

ENGINES = "/translation/engines"
WA = "/word-alignment/engines"


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def mat(translation: str, chapters: range, drop: int = 0) -> dict[tuple[int, int], str]:
    """MAT `chapters` of an eBible translation, less the last `drop` verses of each chapter."""
    verses = ebible_verses(translation, "MAT", chapters)
    last = {c: max(v for cc, v in verses if cc == c) for c, _ in verses}
    return {(c, v): t for (c, v), t in verses.items() if v <= last[c] - drop}


def paratext_corpus(client: httpx.Client, language: str, verses: dict[tuple[int, int], str]) -> str:
    """A corpus of one Paratext project holding `verses` of MAT."""
    zipped = project_zip(f"T{language.upper()}", language, {"MAT": book_usfm("MAT", verses)})
    file_id = upload(client, f"{language}.zip", zipped, "Paratext")
    answer = client.post("/corpora", json={"language": language, "files": [{"fileId": file_id}]})
    assert answer.status_code == 201, answer.text
    corpus_id: str = answer.json()["id"]
    return corpus_id


def per_chapter(keys: set[tuple[int, int]], chapters: tuple[int, ...] = (1, 2)) -> dict[str, int]:
    return {str(c): n for c in chapters if (n := sum(1 for cc, _ in keys if cc == c))}


ENGLISH = mat("engwebp", range(1, 3))
SWAHILI = mat("swh1850", range(1, 3), drop=2)
PAIRED = ENGLISH.keys() & SWAHILI.keys()
UNTRANSLATED = ENGLISH.keys() - SWAHILI.keys()


def start(client: httpx.Client, engine_id: str, body: dict[str, Any], kind: str = ENGINES) -> dict[str, Any]:
    answer = client.post(f"{kind}/{engine_id}/builds", json=body)
    assert answer.status_code == 201, answer.text
    build: dict[str, Any] = answer.json()
    return build


def test_verse_counts_and_chapter_filters_of_a_scripture_build(owner: httpx.Client) -> None:
    """MAT 1–2 in English; the Swahili lacks each chapter's last two verses. The training pairs are
    the verses both have; the pretranslated ones are those without a Swahili verse."""
    engine = create_engine(owner)
    source = paratext_corpus(owner, "en", ENGLISH)
    target = paratext_corpus(owner, "sw", SWAHILI)
    pc_id = parallel_corpus(owner, engine["id"], source, target)
    assert len(UNTRANSLATED) >= 4 and len(PAIRED) > 40

    whole = start(owner, engine["id"], {"pretranslate": [{"parallelCorpusId": pc_id}]})
    data = whole["executionData"]
    assert check(data, "ExecutionData", release=NEWER) == []
    assert data["trainVerseCount"] == {"MAT": per_chapter(PAIRED)}
    assert data["trainCount"] == len(PAIRED)
    assert data["pretranslateVerseCount"] == {"MAT": per_chapter(UNTRANSLATED)}
    assert data["pretranslateCount"] == len(UNTRANSLATED)
    assert (data["isTrainFilteredByChapter"], data["isPretranslateFilteredByChapter"]) == (False, False)
    assert owner.post(f"{ENGINES}/{engine['id']}/current-build/cancel").status_code == 200

    chosen = start(
        owner,
        engine["id"],
        {
            "trainOn": [{"parallelCorpusId": pc_id, "scriptureRange": "MAT2"}],
            "pretranslate": [{"parallelCorpusId": pc_id, "scriptureRange": "MAT1"}],
        },
    )["executionData"]
    assert chosen["trainVerseCount"] == {"MAT": per_chapter(PAIRED, (2,))}
    # What is not trained on is pretranslated whole, as Serval decides it: all of chapter 1.
    assert chosen["pretranslateVerseCount"] == {"MAT": per_chapter(set(ENGLISH), (1,))}
    assert (chosen["isTrainFilteredByChapter"], chosen["isPretranslateFilteredByChapter"]) == (True, True)


def test_text_files_hold_no_verses(owner: httpx.Client) -> None:
    engine = create_engine(owner)
    source = corpus(owner, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"MAT.txt": text(SWH_MAT[:1])})
    pc_id = parallel_corpus(owner, engine["id"], source, target)
    data = start(owner, engine["id"], {"pretranslate": [{"parallelCorpusId": pc_id, "textIds": ["MAT"]}]})[
        "executionData"
    ]
    assert (data["trainCount"], data["pretranslateCount"]) == (1, 2)
    assert (data["trainVerseCount"], data["pretranslateVerseCount"]) == ({}, {})
    assert data["isPretranslateFilteredByChapter"] is False, "text ids are no chapters"


def test_a_word_alignment_build_counts_what_it_aligns(owner: httpx.Client) -> None:
    engine = owner.post(
        WA,
        json={
            "sourceLanguage": "en",
            "targetLanguage": "sw",
            "type": "statistical",
            "isModelPersisted": True,
        },
    ).json()
    assert engine["isModelPersisted"] is True
    source = paratext_corpus(owner, "en", ENGLISH)
    target = paratext_corpus(owner, "sw", SWAHILI)
    pc = owner.post(
        f"{WA}/{engine['id']}/parallel-corpora",
        json={"sourceCorpusIds": [source], "targetCorpusIds": [target]},
    ).json()["id"]
    body = {
        "wordAlignOn": [
            {"parallelCorpusId": pc, "sourceFilters": [{"corpusId": source, "scriptureRange": "MAT1"}]}
        ]
    }
    data = start(owner, engine["id"], body, WA)["executionData"]
    assert check(data, "WordAlignmentExecutionData", release=NEWER) == []
    assert data["trainVerseCount"] == {"MAT": per_chapter(PAIRED)}
    assert data["wordAlignVerseCount"] == {"MAT": per_chapter(PAIRED, (1,))}
    assert (data["isTrainFilteredByChapter"], data["isWordAlignFilteredByChapter"]) == (False, True)
    assert data["diagnostics"] == [] and data["diagnosticsTruncated"] is False
    plain = owner.post(
        WA, json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
    ).json()
    assert "isModelPersisted" not in plain and owner.get(f"{WA}/{engine['id']}").json()["isModelPersisted"]


def test_the_exports_warnings_are_diagnostics_too(owner: httpx.Client) -> None:
    engine = create_engine(owner, "echo")
    source = corpus(owner, "fr", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"MAT.txt": text(["", "", ""])})
    pc_id = parallel_corpus(owner, engine["id"], source, target)
    data = start(owner, engine["id"], {"trainOn": [{"parallelCorpusId": pc_id}]})["executionData"]
    assert check(data, "ExecutionData", release=NEWER) == []
    [mismatch, untrained] = data["warnings"]
    assert untrained == NO_PAIRS
    assert data["diagnostics"] == [
        {
            "code": "CONFIG-1001",
            "category": "CONFIG",
            "message": mismatch,
            "severity": "Warn",
            "data": {"parallelCorpusId": pc_id, "side": "source", "corpusId": source, "language": "fr"},
        },
        {"code": "CONFIG-1002", "category": "CONFIG", "message": NO_PAIRS, "severity": "Warn", "data": {}},
    ]
    assert data["diagnosticsTruncated"] is False


def test_servals_checks_of_an_nmt_build(owner: httpx.Client) -> None:
    """Few pairs to train on is CONFIG-0003; a language NLLB does not know is MODEL-0001 or
    MODEL-0002, and with nothing to train on, MODEL-0004 (an error)."""
    engine = create_engine(owner)
    source = corpus(owner, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"MAT.txt": text(SWH_MAT)})
    parallel_corpus(owner, engine["id"], source, target)
    few = start(owner, engine["id"], {})["executionData"]
    assert [d["code"] for d in few["diagnostics"]] == ["CONFIG-0003"]
    assert few["diagnostics"][0]["data"] == {"trainCount": 3, "minimumTrainCount": 600}
    assert few["warnings"] == []

    unknown = create_engine(owner, targetLanguage="quc")
    data = start(owner, unknown["id"], {"trainOn": []})["executionData"]
    assert check(data, "ExecutionData", release=NEWER) == []
    by_code = {d["code"]: d for d in data["diagnostics"]}
    assert sorted(by_code) == ["MODEL-0002", "MODEL-0004"]
    assert by_code["MODEL-0002"]["data"] == {"resolvedCode": "quc_Latn", "modelName": "tiny-nllb"}
    assert by_code["MODEL-0004"]["severity"] == "Error"
    assert by_code["MODEL-0004"]["data"]["unknownLanguageCodes"] == ["quc"]


def test_a_jobs_warnings_and_a_fault_become_diagnostics(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    build = start(owner, engine["id"], {"trainOn": []})
    stub, job = job_stub(api), as_job(api)
    data = platform_pb2.ExecutionData(
        train_count=0, warnings=["3 rows could not be read", "3 rows could not be read"]
    )
    stub.UpdateBuildExecutionData(
        platform_pb2.UpdateBuildExecutionDataRequest(
            engine_id=engine["id"], build_id=build["id"], execution_data=data
        ),
        metadata=job,
    )
    stub.BuildFaulted(
        platform_pb2.BuildFaultedRequest(build_id=build["id"], message="out of memory"), metadata=job
    )
    done = owner.get(f"{ENGINES}/{engine['id']}/builds/{build['id']}").json()
    assert done["state"] == "Faulted"
    assert check(done["executionData"], "ExecutionData", release=NEWER) == []
    assert done["executionData"]["warnings"] == ["3 rows could not be read"]
    assert [(d["code"], d["severity"], d["message"]) for d in done["executionData"]["diagnostics"]] == [
        ("JOB-1001", "Warn", "3 rows could not be read"),
        ("BUILD-1001", "Error", "out of memory"),
    ]


def test_diagnostics_past_the_cap_keep_the_most_severe() -> None:
    infos = [diagnostics.diagnostic("X-1", diagnostics.Severity.INFO, f"info {n}") for n in range(1500)]
    errors = [diagnostics.build_fault(f"fault {n}") for n in range(3)]
    merged = diagnostics.merged(ExecutionData(diagnostics=infos[:10]), [*infos, *errors])
    assert merged.diagnostics_truncated is True
    kept = merged.diagnostics or []
    assert len(kept) == diagnostics.MAX_DIAGNOSTICS
    assert [d.message for d in kept[:3]] == ["fault 0", "fault 1", "fault 2"]
    again = diagnostics.merged(merged, [])
    assert again.diagnostics_truncated is True and len(again.diagnostics or []) == diagnostics.MAX_DIAGNOSTICS
    assert diagnostics.merged(None, errors[:1]) == ExecutionData(
        diagnostics=errors[:1], diagnostics_truncated=False
    )


def test_verses_are_what_sil_machine_calls_verses() -> None:
    assert verse_of("MAT 1:1") is not None and verse_of("1JN 2:3a") is not None
    assert [verse_of(r) for r in ("MAT:1", "MAT 1:0/1:p", "MAT 1:1/ORG", "XYZ 1:1", "", "MAT 1:")] == [
        None
    ] * 6
    assert verse_count([["MAT 1:1"], ["MAT 1:2-3", "MAT 2:1"], ["NOTES:4"], []]) == {"MAT": {"1": 2, "2": 1}}


def publish_base_model(api: RunningApi, tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"weights")
    store = store_from_settings(api.service.settings)
    publish_folder(store, f"base-models/{name}", folder, Manifest(kind="base-model", name=name))


def test_model_names_the_base_model_a_build_starts_from(
    api: RunningApi, owner: httpx.Client, tmp_path: Path
) -> None:
    engine = create_engine(owner)
    none_yet = owner.post(f"{ENGINES}/{engine['id']}/builds", json={"trainOn": [], "model": "nllb-200"})
    assert none_yet.status_code == 400
    assert none_yet.json()["message"] == (
        "model: 'nllb-200' is not a published base model; no base model is published yet; an administrator "
        "publishes them with `serval admin base-model`"
    )
    publish_base_model(api, tmp_path, "tiny")
    publish_base_model(api, tmp_path, "nllb-600m")
    unknown = owner.post(f"{ENGINES}/{engine['id']}/builds", json={"trainOn": [], "model": "nllb-200"})
    assert unknown.status_code == 400
    assert unknown.json()["message"].endswith("send one of the published base models: nllb-600m, tiny")
    for body, says in [
        ({"model": "../models/x"}, "model: '../models/x' is not a base model's name"),
        ({"model": "tiny", "options": {"baseModel": "nllb-600m"}}, "name different base models; send one"),
        ({"model": ""}, "model: '' is not a base model's name"),
    ]:
        refused = owner.post(f"{ENGINES}/{engine['id']}/builds", json={"trainOn": [], **body})
        assert refused.status_code == 400 and says in refused.json()["message"], refused.text
    smt = create_engine(owner, "smt-transfer")
    refused = owner.post(f"{ENGINES}/{smt['id']}/builds", json={"trainOn": [], "model": "tiny"})
    assert refused.status_code == 400 and "leave `model` out" in refused.json()["message"]
    assert api.launcher.specs == [], "nothing was started"

    started = owner.post(f"{ENGINES}/{engine['id']}/builds", json={"trainOn": [], "model": "tiny"})
    assert started.status_code == 201, started.text
    assert started.json()["options"] == {"baseModel": "tiny"}
    assert '"baseModel": "tiny"' in api.launcher.specs[-1].options_json


def test_a_build_faulted_by_restarts_says_so_in_its_diagnostics(api: RunningApi, owner: httpx.Client) -> None:
    """A build whose job the API service's restarts interrupted once too often faults; its fault
    is an `Error` diagnostic too."""
    assert api.service.services is not None
    engine = create_engine(owner)
    build = start(owner, engine["id"], {"trainOn": []})
    for _ in range(MAX_RESTARTS + 1):
        api.run(recover_builds(api.service.services))
    done = owner.get(f"{ENGINES}/{engine['id']}/builds/{build['id']}").json()
    assert done["state"] == "Faulted"
    assert [(d["code"], d["severity"], d["message"]) for d in done["executionData"]["diagnostics"]] == [
        ("BUILD-1001", "Error", done["message"])
    ]
