"""Pretranslations through the real API service: a job streams rows over InsertPretranslations
with its build's token (the build job's own `PlatformReporter`), clients read them over REST."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import func, select

from build_jobs.report import PlatformReporter
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval_api.auth import ALL_SCOPES, CREATE_ENGINES
from serval_api.db.models import PretranslationRow
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.test_build_export import ENG_MAT, SWH_MAT, corpus, parallel_corpus, paratext_zip, text, upload

ENGINES = "/translation/engines"


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


class Job:
    """What a build job holds: its build id, its token and the platform client it reports with."""

    def __init__(self, api: RunningApi, build: dict[str, Any]) -> None:
        self.api = api
        self.build_id = build["id"]
        self.engine_id = build["engine"]["id"]
        self.token = api.launcher.specs[-1].job_token
        self.metadata = (("authorization", f"Bearer {self.token}"),)
        self.stub = platform_pb2_grpc.TranslationPlatformApiStub(api.channel)

    def started(self) -> None:
        self.stub.BuildStarted(
            platform_pb2.BuildStartedRequest(build_id=self.build_id), metadata=self.metadata
        )

    def insert(self, rows: list[dict[str, Any]]) -> int:
        reporter = PlatformReporter(self.api.grpc_target, self.build_id, self.token)
        try:
            return reporter.insert_pretranslations(self.engine_id, rows)
        finally:
            reporter.close()

    def completed(self) -> None:
        self.stub.BuildCompleted(
            platform_pb2.BuildCompletedRequest(build_id=self.build_id, corpus_size=0, confidence=0.0),
            metadata=self.metadata,
        )

    def source_rows(self) -> list[dict[str, Any]]:
        """The build export's `pretranslate.src.json`, as the job reads it."""

        assert self.api.service.services is not None
        store = self.api.service.services.store
        rows: list[dict[str, Any]] = json.loads(
            store.read_bytes(f"builds/{self.build_id}/pretranslate.src.json")
        )
        return rows


def text_engine(client: httpx.Client) -> tuple[str, str]:
    """An en→sw engine whose parallel corpus lacks the Swahili of MAT 1:2 and 1:3."""
    engine = create_engine(client)
    source = corpus(client, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(client, "sw", {"MAT.txt": text([SWH_MAT[0]])})
    return engine["id"], parallel_corpus(client, engine["id"], source, target)


def start_build(api: RunningApi, client: httpx.Client, engine_id: str, pc_id: str) -> Job:
    """Trains on the corpus it pretranslates: only segments without target text are exported (as
    Serval: what is in the training data is not pretranslated)."""
    body = {"trainOn": [{"parallelCorpusId": pc_id}], "pretranslate": [{"parallelCorpusId": pc_id}]}
    response = client.post(f"{ENGINES}/{engine_id}/builds", json=body)
    assert response.status_code == 201, response.text
    job = Job(api, response.json())
    job.started()
    return job


def translated(rows: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """What a job would send: the export's rows with a translation and a confidence."""
    return [{**row, "translation": f"{tag} {row['translation'][:20]}", "confidence": 0.5} for row in rows]


def many_rows(pc_id: str, count: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "corpusId": pc_id,
            "textId": f"T{n // 100}",
            "sourceRefs": [f"s{n}"],
            "targetRefs": [f"t{n}"],
            "translation": f"{tag} {n}",
            "confidence": n / count,
        }
        for n in range(count)
    ]


def pretranslations(client: httpx.Client, engine_id: str, pc_id: str, **params: str) -> httpx.Response:
    return client.get(f"{ENGINES}/{engine_id}/parallel-corpora/{pc_id}/pretranslations", params=params)


def stored_rows(api: RunningApi, **where: str) -> int:
    assert api.service.services is not None
    db = api.service.services.db

    async def count() -> int:
        query = select(func.count()).select_from(PretranslationRow).filter_by(**where)
        async with db.session() as s:
            return int(await s.scalar(query) or 0)

    return api.run(count())


def test_rows_appear_when_the_build_completes(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    export = job.source_rows()
    assert [row["sourceRefs"] for row in export] == [["MAT:2"], ["MAT:3"]]
    rows = [*translated(export, "sw"), *many_rows(pc_id, 1100, "row")]
    assert job.insert(rows) == 1102

    early = pretranslations(owner, engine_id, pc_id)
    assert early.status_code == 409, "no completed build yet: nothing to read, as in Serval"
    job.completed()

    response = pretranslations(owner, engine_id, pc_id)
    assert response.status_code == 200, response.text
    served = response.json()
    assert served[0] == {
        "textId": "MAT",
        "refs": ["MAT:2"],
        "sourceRefs": ["MAT:2"],
        "targetRefs": ["MAT:2"],
        "translation": f"sw {ENG_MAT[1][:20]}",
        "confidence": 0.5,
    }
    assert [row["translation"] for row in served] == [row["translation"] for row in rows], "source order"

    only = pretranslations(owner, engine_id, pc_id, textId="T3").json()
    assert [row["translation"] for row in only] == [f"row {n}" for n in range(300, 400)]
    older_path = owner.get(f"{ENGINES}/{engine_id}/corpora/{pc_id}/pretranslations", params={"textId": "MAT"})
    assert older_path.status_code == 200 and older_path.json() == served[:2]


def test_reads_check_corpus_owner_and_scope(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    job.completed()
    assert pretranslations(owner, engine_id, pc_id).json() == []
    assert pretranslations(owner, engine_id, "no-such-corpus").status_code == 404
    assert owner.get(f"{ENGINES}/{engine_id}/corpora/no-such-corpus/pretranslations").status_code == 404
    with api.client("owner-b", ALL_SCOPES) as other:
        assert pretranslations(other, engine_id, pc_id).status_code == 403
    with api.client(scopes=(CREATE_ENGINES,)) as unscoped:
        assert pretranslations(unscoped, engine_id, pc_id).status_code == 403


def test_a_newer_build_replaces_the_older_rows(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    first = start_build(api, owner, engine_id, pc_id)
    first.insert(translated(first.source_rows(), "first"))
    first.completed()

    second = start_build(api, owner, engine_id, pc_id)
    second.insert(translated(second.source_rows(), "second"))
    before = [row["translation"] for row in pretranslations(owner, engine_id, pc_id).json()]
    assert all(t.startswith("first") for t in before) and len(before) == 2, "until it completes"
    second.completed()

    after = [row["translation"] for row in pretranslations(owner, engine_id, pc_id).json()]
    assert all(t.startswith("second") for t in after) and len(after) == 2
    assert stored_rows(api, engine_id=engine_id) == 2, "the older revision's rows are deleted"


@pytest.mark.parametrize("ending", ["BuildFaulted", "BuildCanceled", "BuildRestarting"])
def test_rows_of_a_build_that_does_not_complete_are_deleted(
    api: RunningApi, owner: httpx.Client, ending: str
) -> None:
    engine_id, pc_id = text_engine(owner)
    first = start_build(api, owner, engine_id, pc_id)
    first.insert(translated(first.source_rows(), "first"))
    first.completed()
    second = start_build(api, owner, engine_id, pc_id)
    second.insert(translated(second.source_rows(), "second"))
    assert stored_rows(api, build_id=second.build_id) == 2

    request = getattr(platform_pb2, f"{ending}Request")
    fields = {"message": "out of memory"} if ending == "BuildFaulted" else {}
    getattr(second.stub, ending)(request(build_id=second.build_id, **fields), metadata=second.metadata)

    assert stored_rows(api, build_id=second.build_id) == 0
    served = pretranslations(owner, engine_id, pc_id).json()
    assert [row["translation"][:5] for row in served] == ["first", "first"]


def call_insert(job: Job, requests: list[platform_pb2.InsertPretranslationsRequest], metadata: Any) -> None:
    job.stub.InsertPretranslations(iter(requests), metadata=metadata)


def refused(job: Job, requests: list[platform_pb2.InsertPretranslationsRequest], metadata: Any) -> Any:
    with pytest.raises(grpc.RpcError) as error:
        call_insert(job, requests, metadata)
    return error.value.code()


def test_inserts_are_refused_without_the_right_token_or_build(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    other_id, _ = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)

    def row(**fields: Any) -> platform_pb2.InsertPretranslationsRequest:
        values = {"engine_id": engine_id, "corpus_id": pc_id, "text_id": "MAT", "translation": "x", **fields}
        return platform_pb2.InsertPretranslationsRequest(**values)

    assert refused(job, [row()], ()) == grpc.StatusCode.UNAUTHENTICATED
    wrong = (("authorization", "Bearer not-the-token"),)
    assert refused(job, [row()], wrong) == grpc.StatusCode.PERMISSION_DENIED
    assert refused(job, [row(engine_id=other_id)], job.metadata) == grpc.StatusCode.PERMISSION_DENIED
    for bad in (
        [row(corpus_id="")],
        [row(text_id="")],
        [row(confidence=1.5)],
        [row(confidence=float("nan"))],
        [row(), row(engine_id=other_id)],
    ):
        assert refused(job, bad, job.metadata) == grpc.StatusCode.INVALID_ARGUMENT
    assert stored_rows(api, engine_id=engine_id) == 0

    job.completed()
    assert refused(job, [row()], job.metadata) == grpc.StatusCode.FAILED_PRECONDITION
    assert stored_rows(api, engine_id=engine_id) == 0


def paratext_engine(client: httpx.Client) -> tuple[str, str]:
    """MAT 1:1–3 as Paratext projects; the Swahili project lacks verses 2 and 3."""
    engine = create_engine(client)
    ids = []
    for language, lines in (("en", ENG_MAT), ("sw", [SWH_MAT[0]])):
        file_id = upload(client, f"{language}.zip", paratext_zip(lines), "Paratext")
        response = client.post("/corpora", json={"language": language, "files": [{"fileId": file_id}]})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    return engine["id"], parallel_corpus(client, engine["id"], *ids)


def test_usfm_of_a_paratext_source(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = paratext_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    export = job.source_rows()
    assert [row["sourceRefs"] for row in export] == [["MAT 1:2"], ["MAT 1:3"]]
    job.insert([{**row, "translation": f"Tafsiri {n}."} for n, row in enumerate(export, 2)])
    url = f"{ENGINES}/{engine_id}/parallel-corpora/{pc_id}/pretranslations/MAT/usfm"
    assert owner.get(url).status_code == 409
    job.completed()

    response = owner.get(url, params={"textOrigin": "OnlyPretranslated", "template": "Source"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    build = owner.get(f"{ENGINES}/{engine_id}/builds/{job.build_id}").json()
    finished = datetime.fromisoformat(build["dateFinished"].replace("Z", "+00:00")).astimezone(UTC)
    remark = (
        f"\\rem This draft of MAT 1 was generated by AI from TST on {finished:%Y-%m-%d %H:%M:%S}Z. "
        "It should be reviewed carefully for errors before use. "
        "Paragraph break positions were moved to the end of the verse."
    )
    assert lines == ["\\id MAT", "\\c 1", remark, "\\p", "\\v 1", "\\v 2 Tafsiri 2.", "\\v 3 Tafsiri 3."]
    kebab = {"text-origin": "PreferPretranslated", "template": "Source"}
    assert owner.get(url, params=kebab).text == response.text, "Serval's kebab-case names"

    target_book = ["\\id MAT", "\\c 1", remark, "\\p", f"\\v 1 {SWH_MAT[0]}"]
    assert owner.get(url).text.splitlines() == target_book, (
        "Auto, PreferExisting: the target project's book (which has only verse 1), its own text kept"
    )
    existing = owner.get(url, params={"template": "Target", "text-origin": "OnlyExisting"})
    assert existing.status_code == 200 and existing.text.splitlines() == target_book
    assert owner.get(url, params={"template": "Sideways"}).status_code == 400
    assert owner.get(url.replace("/MAT/", "/LUK/")).status_code == 204


def test_usfm_needs_a_paratext_source(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    start_build(api, owner, engine_id, pc_id).completed()
    response = owner.get(f"{ENGINES}/{engine_id}/parallel-corpora/{pc_id}/pretranslations/MAT/usfm")
    assert response.status_code == 400
    assert "Paratext" in response.json()["message"]


def test_deleting_the_engine_deletes_its_rows(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = text_engine(owner)
    job = start_build(api, owner, engine_id, pc_id)
    job.insert(translated(job.source_rows(), "sw"))
    job.completed()
    assert owner.delete(f"{ENGINES}/{engine_id}").status_code == 200
    assert stored_rows(api, engine_id=engine_id) == 0


def test_an_echo_build_pretranslates_each_segment_as_itself(api: RunningApi, owner: httpx.Client) -> None:
    """Serval's echo engine answers every pretranslation with its source; a second build's rows
    replace the first's."""
    engine = create_engine(owner, "echo")
    source = corpus(owner, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"MAT.txt": text([SWH_MAT[0]])})
    pc_id = parallel_corpus(owner, engine["id"], source, target)
    body = {"pretranslate": [{"parallelCorpusId": pc_id}]}
    for _ in range(2):
        response = owner.post(f"{ENGINES}/{engine['id']}/builds", json=body)
        assert response.status_code == 201, response.text
        assert response.json()["state"] == "Pending"
        assert wait_for_build(owner, response.json())["state"] == "Completed"

    served = pretranslations(owner, engine["id"], pc_id)
    assert served.status_code == 200, served.text
    assert [(row["sourceRefs"], row["translation"], row["confidence"]) for row in served.json()] == [
        (["MAT:2"], ENG_MAT[1], 1.0),
        (["MAT:3"], ENG_MAT[2], 1.0),
    ]
    assert stored_rows(api, engine_id=engine["id"]) == 2
