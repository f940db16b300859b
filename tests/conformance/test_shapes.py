"""The checker and the contract table themselves: good bodies pass, each kind of fault is found
with its path, and the transcription holds what the contract document says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conformance.serval_client import (
    ENUMS,
    ENUMS_OF,
    NEWER,
    OLDER,
    OPERATIONS,
    OPERATIONS_1_20,
    OPERATIONS_BY_KEY,
    OPERATIONS_BY_KEY_OF,
    TRANSLATION_OPERATIONS,
    TRANSLATION_OPERATIONS_OF,
    WORD_ALIGNMENT_OPERATIONS,
    shapes,
)
from tests.conformance.shapes import check

LINK = {"id": "e1", "url": "/api/v1/translation/engines/e1"}

BUILD: dict[str, Any] = {
    "id": "b1",
    "url": "/api/v1/translation/engines/e1/builds/b1",
    "revision": 3,
    "engine": LINK,
    "trainOn": [{"parallelCorpus": {"id": "pc1", "url": "/pc1"}, "textIds": ["MAT"]}],
    "step": 0,
    "progress": 1,
    "state": "Completed",
    "dateCreated": "2026-04-01T10:00:00Z",
    "dateFinished": "2026-04-01T10:00:01.123456+00:00",
    "options": {"anything": [1, "two"]},
    "executionData": {"trainCount": 4, "pretranslateCount": 2, "warnings": []},
    "phases": [{"stage": "Inference", "step": None}],
    "canDenormalizeQuotes": False,
    "notInTheClient": {"ignored": True},
}

RESULT: dict[str, Any] = {
    "translation": "Heri",
    "sourceTokens": ["Blessed"],
    "targetTokens": ["Heri"],
    "confidences": [1, 0.5],
    "sources": [["Primary"], []],
    "alignment": [{"sourceIndex": 0, "targetIndex": 0}],
    "phrases": [{"sourceSegmentStart": 0, "sourceSegmentEnd": 1, "targetSegmentCut": 1}],
}


def with_change(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of `body` with the value at `path` replaced, or deleted when `value` is ...."""
    changed = copy.deepcopy(body)
    parent: Any = changed
    for key in path[:-1]:
        parent = parent[key]
    if value is ...:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return changed


def test_good_bodies_have_no_problems() -> None:
    assert check(BUILD, "TranslationBuild") == []
    assert check([BUILD, BUILD], "TranslationBuild[]") == []
    assert check([], "TranslationBuild[]") == []
    assert check(RESULT, "TranslationResult") == []
    assert check({"status": "Healthy", "totalDuration": "00:00:00.01", "results": {}}, "HealthReport") == []
    assert (
        check(
            {"url": "https://x/y", "modelRevision": 1, "expiresAt": "2026-04-01T10:00:00+02:00"},
            "ModelDownloadUrl",
        )
        == []
    )


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (("id",), ..., "$.id: required property missing"),
        (("id",), None, "$.id: null, but required"),
        (("canDenormalizeQuotes",), ..., "$.canDenormalizeQuotes: required property missing"),
        (("revision",), 3.5, "$.revision: number 3.5 where the client expects an int"),
        (("revision",), "3", "$.revision: string '3' where the client expects an int"),
        (("revision",), True, "$.revision: bool True where the client expects an int"),
        (("step",), 2**31, "$.step: 2147483648 does not fit an int"),
        (("state",), "Done", "$.state: 'Done' is not a JobState"),
        (("state",), "completed", "$.state: 'completed' is not a JobState"),
        (("progress",), "1", "$.progress: string '1' where the client expects a double"),
        (("queueDepth",), None, None),
        (("name",), None, None),
        (("dateCreated",), "2026-04-01T10:00:00", "$.dateCreated: '2026-04-01T10:00:00' has no UTC offset"),
        (("dateCreated",), "2026-04-01", "$.dateCreated: '2026-04-01' is not an ISO-8601 date and time"),
        (("dateCreated",), "yesterday", "$.dateCreated: 'yesterday' is not an ISO-8601 date and time"),
        (("dateCreated",), 1775000000, "$.dateCreated: number 1775000000 where the client expects an ISO"),
        (("engine", "url"), ..., "$.engine.url: required property missing"),
        (("engine",), [LINK], "$.engine: a list where the client expects a ResourceLink object"),
        (("executionData", "warnings"), None, "$.executionData.warnings: null, but required"),
        (
            ("executionData", "warnings"),
            [3],
            "$.executionData.warnings[0]: number 3 where the client expects a string",
        ),
        (
            ("trainOn", 0, "parallelCorpus", "id"),
            ...,
            "$.trainOn[0].parallelCorpus.id: required property missing",
        ),
        (
            ("trainOn", 0, "textIds"),
            "MAT",
            "$.trainOn[0].textIds: string 'MAT' where the client expects a list",
        ),
        (("phases", 0, "stage"), "Training", "$.phases[0].stage: 'Training' is not a PhaseStage"),
        (("phases", 0, "started"), "now", "$.phases[0].started: 'now' is not an ISO-8601"),
        (
            ("analysis",),
            [{"parallelCorpusRef": "pc1", "targetQuoteConvention": ""}],
            "$.analysis[0].canDenormalizeQuotes: required",
        ),
    ],
)
def test_each_fault_of_a_build_is_found_where_it_is(
    path: tuple[str | int, ...], value: Any, problem: str | None
) -> None:
    problems = check(with_change(BUILD, path, value), "TranslationBuild")
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_value_types_without_question_mark_are_never_null() -> None:
    """`percentCompleted: double?` may be null; `score: double` of an arc may not, nor a bool."""
    assert check(with_change(BUILD, ("percentCompleted",), None), "TranslationBuild") == []
    engine = {
        "id": "e1",
        "url": "/e1",
        "sourceLanguage": "en",
        "targetLanguage": "sw",
        "type": "echo",
        "isBuilding": False,
        "modelRevision": 0,
        "confidence": 0,
        "corpusSize": 0,
    }
    assert check(engine, "TranslationEngine") == []
    assert check({**engine, "isModelPersisted": None}, "TranslationEngine") == []
    assert check({**engine, "confidence": None}, "TranslationEngine") == ["$.confidence: null, but required"]
    assert check({**engine, "isBuilding": "false"}, "TranslationEngine") == [
        "$.isBuilding: string 'false' where the client expects a bool"
    ]


def test_nested_lists_and_dictionaries_are_checked_element_wise() -> None:
    assert check(with_change(RESULT, ("sources", 1), ["Machine"]), "TranslationResult") == [
        "$.sources[1][0]: 'Machine' is not a TranslationSource (Primary, Secondary, Human)"
    ]
    assert check(with_change(RESULT, ("confidences", 0), None), "TranslationResult") == [
        "$.confidences[0]: null in a list of double"
    ]
    assert check(with_change(RESULT, ("alignment", 0, "targetIndex"), ...), "TranslationResult") == [
        "$.alignment[0].targetIndex: required property missing"
    ]
    report = {"status": "Healthy", "totalDuration": "0", "results": {"database": {"status": "Healthy"}}}
    assert check(report, "HealthReport") == ["$.results.database.duration: required property missing"]
    assert check({"status": "Healthy", "results": {"database": "ok"}}, "HealthReport") == [
        "$.totalDuration: required property missing",
        "$.results.database: string 'ok' where the client expects a HealthReportEntry object",
    ]


def test_a_top_level_null_or_wrong_container_is_a_problem() -> None:
    assert check(None, "TranslationBuild") == ["$: null where the client expects TranslationBuild"]
    assert check(BUILD, "TranslationBuild[]") == ["$: an object where the client expects a list"]
    assert check([BUILD], "TranslationBuild") == [
        "$: a list where the client expects a TranslationBuild object"
    ]
    with pytest.raises(KeyError):
        check({}, "NoSuchShape")


def test_the_table_holds_the_70_operations_of_the_contract() -> None:
    assert len(OPERATIONS) == len(OPERATIONS_BY_KEY) == 70
    assert len(WORD_ALIGNMENT_OPERATIONS) == 17 and len(TRANSLATION_OPERATIONS) == 53
    align = OPERATIONS_BY_KEY["WordAlignmentEngines.Align"]
    assert (align.verb, align.path, align.response) == (
        "POST",
        "word-alignment/engines/{id}/align",
        "WordAlignmentResult",
    )
    assert OPERATIONS_BY_KEY["WordAlignmentEngines.GetAllWordAlignments"].query == ("text-id",)
    download = OPERATIONS_BY_KEY["DataFiles.Download"]
    assert (download.verb, download.path, download.success) == ("POST", "files/{id}/contents", (206, 200))
    usfm = OPERATIONS_BY_KEY["TranslationEngines.GetPretranslatedUsfm"]
    assert usfm.response is None and len(usfm.query) == 6 and 204 in usfm.errors
    assert OPERATIONS_BY_KEY["TranslationBuilds.GetAllBuildsCreatedAfter"].response == "TranslationBuild[]"
    assert OPERATIONS_BY_KEY["Webhooks.Create"].success == (201,)
    for op in OPERATIONS:
        if op.response not in (None, "FileResponse"):
            check([] if op.response.endswith("[]") else {}, op.response)  # every named shape exists


def test_the_shapes_transcribe_the_contract() -> None:
    table = shapes()
    build = {p.name: p for p in table["TranslationBuild"]}
    assert len(build) == 24
    assert build["canDenormalizeQuotes"].required and build["canDenormalizeQuotes"].type == "bool"
    assert build["queueDepth"].nullable and not build["queueDepth"].required
    assert build["executionData"].type == "ExecutionData" and build["executionData"].required
    arc = {p.name: p for p in table["WordGraphArc"]}
    assert arc["sources"].type == "IList<IList<TranslationSource>>"
    entry = {p.name: p for p in table["HealthReportEntry"]}
    assert entry["data"].type == "IDictionary<string, string>" and entry["data"].nullable
    execution = {p.name: p for p in table["WordAlignmentExecutionData"]}
    assert [name for name, p in execution.items() if p.required] == [
        "trainCount",
        "wordAlignCount",
        "warnings",
    ]
    assert table["WordAlignmentBuild"][6].name == "wordAlignOn"
    assert [p.name for p in table["Pretranslation"] if p.required] == [
        "textId",
        "sourceRefs",
        "targetRefs",
        "translation",
        "confidence",
    ]
    referenced = {
        name
        for props in table.values()
        for p in props
        for name in p.type.replace("IList<", " ")
        .replace("IDictionary<string, ", " ")
        .replace(">", " ")
        .split()
    }
    assert referenced <= set(table) | set(ENUMS) | {
        "string",
        "int",
        "double",
        "float",
        "bool",
        "DateTimeOffset",
        "object",
    }


def test_the_1_20_table_drops_webhooks_and_adds_five() -> None:
    newer = OPERATIONS_BY_KEY_OF[NEWER]
    assert len(OPERATIONS_1_20) == len(newer) == 71
    assert len(TRANSLATION_OPERATIONS_OF[NEWER]) == 54 and len(TRANSLATION_OPERATIONS_OF[OLDER]) == 53
    assert set(OPERATIONS_BY_KEY) - set(newer) == {
        "Webhooks.GetAll",
        "Webhooks.Create",
        "Webhooks.Get",
        "Webhooks.Delete",
    }
    assert set(newer) - set(OPERATIONS_BY_KEY) == {
        "ApiKeys.Create",
        "ApiKeys.GetAll",
        "ApiKeys.Get",
        "ApiKeys.Delete",
        "TranslationEngines.GetAllPretranslationConfidences",
    }
    create = newer["ApiKeys.Create"]
    assert (create.verb, create.path, create.success, create.response, create.errors) == (
        "POST",
        "api-keys",
        (201,),
        "ApiKeyCreated",
        (400, 503),
    )
    assert newer["ApiKeys.GetAll"].query == ("clientId",)
    assert newer["ApiKeys.Delete"].response is None and newer["ApiKeys.Delete"].success == (200,)
    confidences = newer["TranslationEngines.GetAllPretranslationConfidences"]
    assert confidences.path.endswith("/parallel-corpora/{parallelCorpusId}/confidences")
    assert confidences.errors == (401, 403, 404, 409, 503)
    for op in OPERATIONS_1_20:
        if op.response not in (None, "FileResponse"):
            check([] if op.response.endswith("[]") else {}, op.response, release=NEWER)


def test_the_1_20_shapes_transcribe_the_contract() -> None:
    table = shapes(NEWER)
    assert "Webhook" not in table and "WebhookEvent" not in ENUMS_OF[NEWER]
    assert ENUMS_OF[NEWER]["DiagnosticSeverity"] == ("Info", "Warn", "Error")
    created = {p.name: p for p in table["ApiKeyCreated"]}
    assert created["key"].required and {p.name for p in table["ApiKey"]} == set(created) - {"key"}
    assert [p.name for p in table["ApiKey"] if not p.required] == ["expiresAt", "revokedAt"]
    execution = {p.name: p for p in table["ExecutionData"]}
    assert len(execution) == 14
    assert execution["trainVerseCount"].type == "IDictionary<string, IDictionary<string, int>>"
    assert execution["averagePretranslationConfidence"].nullable
    assert {p.name for p in table["WordAlignmentExecutionData"]} >= {
        "isWordAlignFilteredByChapter",
        "wordAlignVerseCount",
        "diagnostics",
        "diagnosticsTruncated",
    }
    assert table["TranslationBuildConfig"][-1].name == "model"
    assert table["WordAlignmentEngineConfig"][-1].name == "isModelPersisted"
    assert shapes(OLDER)["ExecutionData"] != table["ExecutionData"], "each release reads its own"
    referenced = {
        name
        for props in table.values()
        for p in props
        for name in p.type.replace("IList<", " ")
        .replace("IDictionary<string, ", " ")
        .replace(">", " ")
        .split()
    }
    assert referenced <= set(table) | set(ENUMS_OF[NEWER]) | {
        "string",
        "int",
        "double",
        "float",
        "bool",
        "DateTimeOffset",
        "object",
    }


DIAGNOSTIC = {
    "code": "CONFIG-0003",
    "category": "CONFIG",
    "message": "few",
    "severity": "Warn",
    "data": {"n": 1},
}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, None),
        ({"trainVerseCount": {"MAT": {"1": 3, "2": 1}}, "diagnostics": [DIAGNOSTIC]}, None),
        (
            {"trainVerseCount": {"MAT": 3}},
            "$.trainVerseCount.MAT: number 3 where the client expects an object",
        ),
        ({"pretranslateVerseCount": {"MAT": {"1": "3"}}}, "$.pretranslateVerseCount.MAT.1: string '3'"),
        (
            {"diagnostics": [{**DIAGNOSTIC, "severity": "Warning"}]},
            "$.diagnostics[0].severity: 'Warning' is not",
        ),
        ({"diagnostics": [{**DIAGNOSTIC, "data": None}]}, "$.diagnostics[0].data: null, but required"),
        ({"diagnosticsTruncated": None}, None),
        ({"averagePretranslationConfidence": "0.5"}, "$.averagePretranslationConfidence: string '0.5'"),
    ],
)
def test_1_20_execution_data_faults_are_found(change: dict[str, Any], problem: str | None) -> None:
    body = {"trainCount": 1, "pretranslateCount": 0, "warnings": [], **change}
    problems = check(body, "ExecutionData", release=NEWER)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems
    assert check(body, "ExecutionData") == [], "the older client ignores what it does not know"
