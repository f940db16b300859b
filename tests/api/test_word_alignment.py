"""Word-alignment engines (`statistical`) through the real API service: REST under
`/api/v1/word-alignment`, gRPC `serval.word_alignment.v1` over loopback, SQLite. A build's job is
played by the test over WordAlignmentPlatformApi with the build's real job token, as the build job
does: it reads the export (`word-align.json`), streams InsertWordAlignments and completes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import select

from serval.inference.v1 import node_pb2
from serval.translation.v1 import engine_pb2 as translation_pb2
from serval.translation.v1 import engine_pb2_grpc as translation_pb2_grpc
from serval.word_alignment.v1 import common_pb2, engine_pb2, engine_pb2_grpc, platform_pb2, platform_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.db.models import WebhookDeliveryRow
from serval_common.jobs import WORD_ALIGN_INPUT
from tests.api.conftest import RunningApi, create_engine
from tests.api.test_build_export import ENG_MAT, SWH_MAT, corpus, text
from tests.api.test_node_protocol import ScriptedNode, new_node_token

WA = "/word-alignment/engines"


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def wa_engine(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical", **fields}
    response = client.post(WA, json=body)
    assert response.status_code == 201, response.text
    engine: dict[str, Any] = response.json()
    return engine


def wa_parallel_corpus(client: httpx.Client, engine_id: str, source: str, target: str) -> str:
    body = {"sourceCorpusIds": [source], "targetCorpusIds": [target]}
    response = client.post(f"{WA}/{engine_id}/parallel-corpora", json=body)
    assert response.status_code == 201, response.text
    pc_id: str = response.json()["id"]
    return pc_id


def bible_engine(client: httpx.Client) -> tuple[str, str]:
    """An en→sw word-alignment engine with one parallel corpus: MAT 1:1–3, whose Swahili 1:2 is blank."""
    engine = wa_engine(client)
    source = corpus(client, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(client, "sw", {"MAT.txt": text([SWH_MAT[0], "", SWH_MAT[2]])})
    return engine["id"], wa_parallel_corpus(client, engine["id"], source, target)


def export(api: RunningApi, build_id: str) -> list[dict[str, Any]]:
    assert api.service.services is not None
    store = api.service.services.store
    rows: list[dict[str, Any]] = json.loads(store.read_bytes(f"builds/{build_id}/{WORD_ALIGN_INPUT}"))
    return rows


class Job:
    """A word-alignment build job: its build, its token, the platform API it reports to."""

    def __init__(self, api: RunningApi, build: dict[str, Any]) -> None:
        self.api = api
        self.build_id = build["id"]
        self.engine_id = build["engine"]["id"]
        spec = api.launcher.specs[-1]
        assert spec.build_id == self.build_id
        self.metadata = (("authorization", f"Bearer {spec.job_token}"),)
        self.stub = platform_pb2_grpc.WordAlignmentPlatformApiStub(api.channel)

    def started(self) -> None:
        self.stub.BuildStarted(
            platform_pb2.BuildStartedRequest(build_id=self.build_id), metadata=self.metadata
        )

    def insert(self, rows: list[dict[str, Any]], engine_id: str | None = None) -> None:
        """Each export row aligned word by word on the diagonal, as a fake aligner would."""
        requests = []
        for row in rows:
            source, target = row["source"].split(), row["target"].split()
            links = [
                common_pb2.AlignedWordPair(source_index=i, target_index=i, score=0.5)
                for i in range(min(len(source), len(target)))
            ]
            requests.append(
                platform_pb2.InsertWordAlignmentsRequest(
                    engine_id=engine_id or self.engine_id,
                    corpus_id=row["corpusId"],
                    text_id=row["textId"],
                    source_refs=row["sourceRefs"],
                    target_refs=row["targetRefs"],
                    source_tokens=source,
                    target_tokens=target,
                    alignment=links,
                )
            )
        self.stub.InsertWordAlignments(iter(requests), metadata=self.metadata)

    def completed(self) -> None:
        self.stub.BuildCompleted(
            platform_pb2.BuildCompletedRequest(build_id=self.build_id, corpus_size=3, confidence=0.0),
            metadata=self.metadata,
        )


def start(client: httpx.Client, engine_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = client.post(f"{WA}/{engine_id}/builds", json=body if body is not None else {})
    assert response.status_code == 201, response.text
    build: dict[str, Any] = response.json()
    return build


def test_engines_are_scoped_to_their_kind(api: RunningApi, owner: httpx.Client) -> None:
    engine = wa_engine(owner, name="glosses")
    assert engine["url"].endswith(f"/api/v1/word-alignment/engines/{engine['id']}")
    assert (engine["type"], engine["modelRevision"], engine["isBuilding"], engine["name"]) == (
        "statistical",
        0,
        False,
        "glosses",
    )
    assert "isModelPersisted" not in engine
    nmt = create_engine(owner)

    assert [e["id"] for e in owner.get(WA).json()] == [engine["id"]]
    assert [e["id"] for e in owner.get("/translation/engines").json()] == [nmt["id"]]
    assert owner.get(f"{WA}/{engine['id']}").json() == engine
    assert owner.get(f"/translation/engines/{engine['id']}").status_code == 404
    assert owner.get(f"{WA}/{nmt['id']}").status_code == 404
    assert owner.delete(f"{WA}/{nmt['id']}").status_code == 404
    assert owner.post(f"{WA}/{nmt['id']}/builds", json={}).status_code == 404
    assert owner.get(f"{WA}/{nmt['id']}/parallel-corpora").status_code == 404
    assert owner.post(f"/translation/engines/{engine['id']}/builds", json={}).status_code == 404
    assert owner.post(f"/translation/engines/{engine['id']}/translate", json="hi").status_code == 404

    wrong_kind = owner.post(WA, json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"})
    assert wrong_kind.status_code == 405, wrong_kind.text
    statistical_as_translation = owner.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
    )
    assert statistical_as_translation.status_code == 405
    assert (
        owner.post(WA, json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "bogus"}).status_code
        == 400
    )
    assert owner.post(WA, json={"sourceLanguage": "en", "type": "statistical"}).status_code == 400
    assert owner.get(f"{WA}/..%2F..").status_code == 404

    with api.client(owner="owner-b", scopes=ALL_SCOPES) as stranger:
        assert stranger.get(WA).json() == []
        # Another owner's engine: 403, as Serval's WordAlignmentEngineTests ("Engine is not owned").
        assert stranger.get(f"{WA}/{engine['id']}").status_code == 403
        assert stranger.delete(f"{WA}/{engine['id']}").status_code == 403
        assert stranger.post(f"{WA}/{engine['id']}/builds", json={}).status_code == 403

    queue = owner.get("/word-alignment/engine-types/statistical/queues")
    assert queue.json() == {"size": 0, "engineType": "statistical"}
    assert owner.get("/word-alignment/engine-types/nmt/queues").status_code == 405
    assert owner.get("/translation/engine-types/statistical/queues").status_code == 405

    assert owner.delete(f"{WA}/{engine['id']}").status_code == 200
    assert owner.get(f"{WA}/{engine['id']}").status_code == 404


def test_parallel_corpora(api: RunningApi, owner: httpx.Client) -> None:
    engine_id = wa_engine(owner)["id"]
    en = corpus(owner, "en", {"MAT.txt": text(ENG_MAT)})
    sw = corpus(owner, "sw", {"MAT.txt": text(SWH_MAT)})
    created = owner.post(
        f"{WA}/{engine_id}/parallel-corpora",
        json={"name": "mat", "sourceCorpusIds": [en], "targetCorpusIds": [sw]},
    )
    assert created.status_code == 201, created.text
    pc = created.json()
    assert created.headers["Location"] == pc["url"]
    assert pc["url"].endswith(f"/word-alignment/engines/{engine_id}/parallel-corpora/{pc['id']}")
    assert pc["engine"]["url"].endswith(f"/word-alignment/engines/{engine_id}")
    assert [c["id"] for c in pc["sourceCorpora"]] == [en]
    base = f"{WA}/{engine_id}/parallel-corpora"
    assert owner.get(base).json() == [pc]
    assert owner.get(f"{base}/{pc['id']}").json() == pc
    updated = owner.patch(f"{base}/{pc['id']}", json={"targetCorpusIds": [sw, en]})
    assert [c["id"] for c in updated.json()["targetCorpora"]] == [sw, en]

    assert owner.post(base, json={"sourceCorpusIds": ["nope"], "targetCorpusIds": [sw]}).status_code == 400
    no_source = owner.post(base, json={"sourceCorpusIds": [], "targetCorpusIds": [sw]})
    assert no_source.status_code == 201, "as Serval; a build that uses it is refused"
    assert owner.delete(f"{base}/{no_source.json()['id']}").status_code == 200
    assert owner.get(f"{base}/unknown").status_code == 404
    nmt = create_engine(owner)["id"]
    translation_pc = owner.post(
        f"/translation/engines/{nmt}/parallel-corpora",
        json={"sourceCorpusIds": [en], "targetCorpusIds": [sw]},
    ).json()["id"]
    assert owner.get(f"{base}/{translation_pc}").status_code == 404
    assert owner.get(f"/translation/engines/{engine_id}/parallel-corpora/{pc['id']}").status_code == 404
    with api.client(owner="owner-b", scopes=ALL_SCOPES) as stranger:
        assert stranger.get(f"{base}/{pc['id']}").status_code == 403
        assert stranger.delete(f"{base}/{pc['id']}").status_code == 403

    assert owner.delete(f"{base}/{pc['id']}").status_code == 200
    assert owner.get(base).json() == []


def test_build_exports_the_pairs_to_align(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = bible_engine(owner)
    build = start(owner, engine_id, {"name": "first"})
    assert build["url"].endswith(f"/word-alignment/engines/{engine_id}/builds/{build['id']}")
    assert build["state"] == "Pending" and build["name"] == "first"
    assert build["executionData"] == {
        "trainCount": 2,
        "wordAlignCount": 2,
        "warnings": [],
        "engineSourceLanguageTag": "en",
        "engineTargetLanguageTag": "sw",
        # Serval 1.20's: Text files hold no verses of Scripture, and no filter chose chapters.
        "isTrainFilteredByChapter": False,
        "isWordAlignFilteredByChapter": False,
        "trainVerseCount": {},
        "wordAlignVerseCount": {},
        "diagnostics": [],
        "diagnosticsTruncated": False,
    }
    assert "wordAlignOn" not in build and "trainOn" not in build, "omitted: all the engine's corpora"
    spec = api.launcher.specs[-1]
    assert (spec.engine_type, spec.train, spec.build_id) == ("statistical", True, build["id"])

    assert export(api, build["id"]) == [
        {
            "corpusId": pc_id,
            "textId": "MAT",
            "sourceRefs": [f"MAT:{n}"],
            "targetRefs": [f"MAT:{n}"],
            "source": ENG_MAT[n - 1],
            "target": SWH_MAT[n - 1],
        }
        for n in (1, 3)
    ]

    assert owner.post(f"{WA}/{engine_id}/builds", json={}).status_code == 409
    current = owner.get(f"{WA}/{engine_id}/current-build")
    assert current.status_code == 200 and current.json()["id"] == build["id"]
    assert owner.get(f"{WA}/{engine_id}/builds").json() == [current.json()]
    too_late = owner.get(f"{WA}/{engine_id}/builds/{build['id']}", params={"min-revision": 99})
    assert too_late.status_code == 408
    canceled = owner.post(f"{WA}/{engine_id}/current-build/cancel")
    assert canceled.status_code == 200 and canceled.json()["state"] == "Canceled"
    assert owner.get(f"{WA}/{engine_id}/current-build").status_code == 204
    assert owner.post(f"{WA}/{engine_id}/current-build/cancel").status_code == 204

    none = start(owner, engine_id, {"trainOn": [], "wordAlignOn": []})
    assert none["wordAlignOn"] == [] and none["executionData"]["wordAlignCount"] == 0
    assert export(api, none["id"]) == []
    owner.post(f"{WA}/{engine_id}/current-build/cancel")

    source_id = owner.get(f"{WA}/{engine_id}/parallel-corpora/{pc_id}").json()["sourceCorpora"][0]["id"]
    chosen = {"parallelCorpusId": pc_id, "sourceFilters": [{"corpusId": source_id, "textIds": ["MAT"]}]}
    filtered = start(owner, engine_id, {"trainOn": [{"parallelCorpusId": pc_id}], "wordAlignOn": [chosen]})
    assert filtered["wordAlignOn"][0]["sourceFilters"][0]["textIds"] == ["MAT"]
    assert filtered["wordAlignOn"][0]["parallelCorpus"]["url"].endswith(
        f"/word-alignment/engines/{engine_id}/parallel-corpora/{pc_id}"
    )
    assert filtered["trainOn"][0]["parallelCorpus"]["url"].endswith(
        f"/word-alignment/engines/{engine_id}/parallel-corpora/{pc_id}"
    )
    assert "targetFilters" not in filtered["wordAlignOn"][0]
    assert [row["sourceRefs"] for row in export(api, filtered["id"])] == [["MAT:1"], ["MAT:3"]]
    owner.post(f"{WA}/{engine_id}/current-build/cancel")
    elsewhere = {**chosen, "sourceFilters": [{"corpusId": source_id, "textIds": ["MRK"]}]}
    nothing = start(owner, engine_id, {"wordAlignOn": [elsewhere]})
    assert export(api, nothing["id"]) == [] and nothing["executionData"]["wordAlignCount"] == 0


def test_bad_builds_are_refused(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = bible_engine(owner)
    for body in (
        {"options": {"iterations": 0}},
        {"options": []},
        {"wordAlignOn": [{"parallelCorpusId": "unknown"}]},
        {"wordAlignOn": [{}]},
        {"wordAlignOn": [{"parallelCorpusId": pc_id, "targetFilters": [{"corpusId": "not-in-it"}]}]},
        {"trainOn": [{"parallelCorpusId": "unknown"}]},
        {"wordAlignOn": "not a list"},
    ):
        response = owner.post(f"{WA}/{engine_id}/builds", json=body)
        assert response.status_code == 400, (body, response.text)
    assert owner.get(f"{WA}/{engine_id}/builds").json() == []
    assert api.launcher.specs == []
    assert owner.get(f"{WA}/{engine_id}/builds/unknown").status_code == 404


def test_word_alignments_of_the_current_model(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, pc_id = bible_engine(owner)
    rows_url = f"{WA}/{engine_id}/corpora/{pc_id}/word-alignments"
    assert owner.get(rows_url).status_code == 409, "never built: nothing to read, as in Serval"
    build = start(owner, engine_id)
    job = Job(api, build)
    job.started()
    pairs = export(api, build["id"])
    job.insert(pairs)
    job.stub.UpdateBuildExecutionData(
        platform_pb2.UpdateBuildExecutionDataRequest(
            engine_id=engine_id,
            build_id=build["id"],
            execution_data=platform_pb2.ExecutionData(word_align_count=2),
        ),
        metadata=job.metadata,
    )
    job.stub.UpdateBuildStatus(
        platform_pb2.UpdateBuildStatusRequest(build_id=build["id"], step=3, progress=0.5, message="aligning"),
        metadata=job.metadata,
    )
    status = owner.get(f"{WA}/{engine_id}/builds/{build['id']}").json()
    assert (
        status["state"],
        status["step"],
        status["message"],
        status["executionData"]["wordAlignCount"],
    ) == (
        "Active",
        3,
        "aligning",
        2,
    )
    assert owner.get(rows_url).status_code == 409, "rows appear when their build completes"
    job.completed()
    assert owner.get(f"{WA}/{engine_id}").json()["modelRevision"] == 1

    served = owner.get(rows_url)
    assert served.status_code == 200, served.text
    first_source, first_target = ENG_MAT[0].split(), SWH_MAT[0].split()
    assert served.json()[0] == {
        "textId": "MAT",
        "sourceRefs": ["MAT:1"],
        "targetRefs": ["MAT:1"],
        "refs": ["MAT:1"],
        "sourceTokens": first_source,
        "targetTokens": first_target,
        "alignment": [
            {"sourceIndex": i, "targetIndex": i, "score": 0.5}
            for i in range(min(len(first_source), len(first_target)))
        ],
    }
    assert [row["sourceRefs"] for row in served.json()] == [["MAT:1"], ["MAT:3"]]
    assert owner.get(rows_url, params={"text-id": "MRK"}).json() == []
    assert len(owner.get(rows_url, params={"text-id": "MAT"}).json()) == 2
    assert owner.get(f"{WA}/{engine_id}/corpora/unknown/word-alignments").status_code == 404
    with api.client(owner="owner-b", scopes=ALL_SCOPES) as stranger:
        assert stranger.get(rows_url).status_code == 403

    second = start(owner, engine_id)
    job2 = Job(api, second)
    job2.started()
    job2.insert(pairs[1:])
    assert len(owner.get(rows_url).json()) == 2, "the current model's rows until the next build completes"
    job2.completed()
    assert [row["sourceRefs"] for row in owner.get(rows_url).json()] == [["MAT:3"]]
    assert stored_word_alignments(api) == 1, "the older revision's rows are gone"

    with pytest.raises(grpc.RpcError) as late:
        job2.insert(pairs)
    assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def stored_word_alignments(api: RunningApi) -> int:
    from sqlalchemy import func

    from serval_api.db.models import WordAlignmentRow

    assert api.service.services is not None
    db = api.service.services.db

    async def count() -> int:
        async with db.session() as s:
            return int(await s.scalar(select(func.count()).select_from(WordAlignmentRow)) or 0)

    return api.run(count())


def test_insert_word_alignments_refuses_hostile_streams(api: RunningApi, owner: httpx.Client) -> None:
    engine_id, _ = bible_engine(owner)
    build = start(owner, engine_id)
    job = Job(api, build)
    job.started()
    stub = job.stub

    def send(metadata: tuple[tuple[str, str], ...], **fields: Any) -> grpc.StatusCode:
        row = {
            "engine_id": engine_id,
            "corpus_id": "pc",
            "text_id": "MAT",
            "source_tokens": ["a", "b"],
            "target_tokens": ["x"],
            **fields,
        }
        try:
            stub.InsertWordAlignments(
                iter([platform_pb2.InsertWordAlignmentsRequest(**row)]), metadata=metadata
            )
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    def link(s: int, t: int, score: float = 0.5) -> list[common_pb2.AlignedWordPair]:
        return [common_pb2.AlignedWordPair(source_index=s, target_index=t, score=score)]

    assert send(job.metadata, alignment=link(1, 0)) == grpc.StatusCode.OK
    assert send((), alignment=link(1, 0)) == grpc.StatusCode.UNAUTHENTICATED
    assert send((("authorization", "Bearer not-the-token"),)) == grpc.StatusCode.PERMISSION_DENIED
    other = wa_engine(owner)["id"]
    assert send(job.metadata, engine_id=other) == grpc.StatusCode.PERMISSION_DENIED
    assert send(job.metadata, alignment=link(2, 0)) == grpc.StatusCode.INVALID_ARGUMENT
    assert send(job.metadata, alignment=link(0, -1)) == grpc.StatusCode.INVALID_ARGUMENT
    assert send(job.metadata, alignment=link(0, 0, 1.5)) == grpc.StatusCode.INVALID_ARGUMENT
    assert send(job.metadata, alignment=link(0, 0, float("nan"))) == grpc.StatusCode.INVALID_ARGUMENT
    assert send(job.metadata, text_id="") == grpc.StatusCode.INVALID_ARGUMENT
    assert send(job.metadata, corpus_id="x\x00") == grpc.StatusCode.INVALID_ARGUMENT
    assert stored_word_alignments(api) == 1, "refused streams store nothing"

    with pytest.raises(grpc.RpcError) as anonymous:
        stub.UpdateBuildStatus(
            platform_pb2.UpdateBuildStatusRequest(build_id=build["id"], step=1), metadata=()
        )
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_align_is_validated_before_any_node_is_asked(api: RunningApi, owner: httpx.Client) -> None:
    engine_id = wa_engine(owner)["id"]
    align = f"{WA}/{engine_id}/align"
    pair = {"sourceSegment": "In the beginning", "targetSegment": "Hapo mwanzo"}
    assert owner.post(align, json=pair).status_code == 409, "no model yet"
    assert owner.post(align, json={"sourceSegment": " ", "targetSegment": "x"}).status_code == 400
    assert owner.post(align, json={"sourceSegment": "x"}).status_code == 400
    assert owner.post(align, json={"sourceSegment": "x" * 10_000, "targetSegment": "y"}).status_code == 413
    assert owner.post(f"{WA}/unknown/align", json=pair).status_code == 404
    nmt = create_engine(owner)["id"]
    assert owner.post(f"{WA}/{nmt}/align", json=pair).status_code == 404
    with api.client(owner="owner-b", scopes=ALL_SCOPES) as stranger:
        assert stranger.post(align, json=pair).status_code == 403


def test_grpc_engine_api(api: RunningApi, owner: httpx.Client) -> None:
    stub = engine_pb2_grpc.WordAlignmentEngineApiStub(api.channel)
    key = (("x-api-key", api.api_key(scopes=ALL_SCOPES)),)

    def code(call: Any, request: Any) -> grpc.StatusCode:
        try:
            call(request, metadata=key)
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    stub.Create(
        engine_pb2.CreateRequest(
            engine_type="Statistical",
            engine_id="wa-1",
            engine_name="g",
            source_language="en",
            target_language="sw",
        ),
        metadata=key,
    )
    assert owner.get(f"{WA}/wa-1").json()["name"] == "g"
    create_nmt = engine_pb2.CreateRequest(engine_type="Nmt", source_language="en", target_language="sw")
    assert code(stub.Create, create_nmt) == grpc.StatusCode.UNIMPLEMENTED
    assert (
        code(
            stub.Create,
            engine_pb2.CreateRequest(
                engine_type="Statistical", engine_id="wa-1", source_language="en", target_language="sw"
            ),
        )
        == grpc.StatusCode.ALREADY_EXISTS
    )

    align = engine_pb2.GetWordAlignmentRequest(engine_id="wa-1", source_segment="a", target_segment="b")
    assert code(stub.GetWordAlignment, align) == grpc.StatusCode.FAILED_PRECONDITION
    assert (
        stub.GetQueueSize(engine_pb2.GetQueueSizeRequest(engine_type="Statistical"), metadata=key).size == 0
    )
    assert (
        code(stub.GetQueueSize, engine_pb2.GetQueueSizeRequest(engine_type="Nmt"))
        == grpc.StatusCode.UNIMPLEMENTED
    )

    files = {side: _file_location(owner, lines) for side, lines in (("src", ENG_MAT), ("trg", SWH_MAT[:1]))}

    def monolingual(
        corpus_id: str, language: str, location: str, **choice: Any
    ) -> engine_pb2.MonolingualCorpus:
        return engine_pb2.MonolingualCorpus(
            id=corpus_id,
            language=language,
            files=[
                engine_pb2.CorpusFile(location=location, format=engine_pb2.FILE_FORMAT_TEXT, text_id="MAT")
            ],
            **choice,
        )

    carried = engine_pb2.ParallelCorpus(
        id="carried",
        source_corpora=[monolingual("en", "en", files["src"], train_on_all=True, word_align_on_all=True)],
        target_corpora=[monolingual("sw", "sw", files["trg"], train_on_all=True, word_align_on_all=True)],
    )
    stub.StartBuild(
        engine_pb2.StartBuildRequest(
            engine_id="wa-1", build_id="wa-build-1", options="{}", corpora=[carried]
        ),
        metadata=key,
    )
    assert [(r["corpusId"], r["sourceRefs"]) for r in export(api, "wa-build-1")] == [("carried", ["MAT:1"])]
    build = owner.get(f"{WA}/wa-1/builds/wa-build-1").json()
    assert build["executionData"]["wordAlignCount"] == 1 and build["executionData"]["trainCount"] == 1
    assert (
        code(stub.StartBuild, engine_pb2.StartBuildRequest(engine_id="wa-1"))
        == grpc.StatusCode.ALREADY_EXISTS
    )
    cancel = stub.CancelBuild(engine_pb2.CancelBuildRequest(engine_id="wa-1"), metadata=key)
    assert cancel.build_id == "wa-build-1"
    assert (
        code(stub.CancelBuild, engine_pb2.CancelBuildRequest(engine_id="wa-1")) == grpc.StatusCode.NOT_FOUND
    )
    bad_options = engine_pb2.StartBuildRequest(engine_id="wa-1", options='{"iterations": 0}')
    assert code(stub.StartBuild, bad_options) == grpc.StatusCode.INVALID_ARGUMENT
    elsewhere = carried.__deepcopy__()
    elsewhere.source_corpora[0].files[0].location = "builds/other/train.src.txt"
    stolen = engine_pb2.StartBuildRequest(engine_id="wa-1", corpora=[elsewhere])
    assert code(stub.StartBuild, stolen) == grpc.StatusCode.INVALID_ARGUMENT

    nmt = create_engine(owner)["id"]
    assert code(stub.Delete, engine_pb2.DeleteRequest(engine_id=nmt)) == grpc.StatusCode.NOT_FOUND
    assert code(stub.StartBuild, engine_pb2.StartBuildRequest(engine_id=nmt)) == grpc.StatusCode.NOT_FOUND
    translation = translation_pb2_grpc.TranslationEngineApiStub(api.channel)
    translate = translation_pb2.TranslateRequest(engine_id="wa-1", segment="a", n=1)
    assert code(translation.Translate, translate) == grpc.StatusCode.NOT_FOUND
    assert (
        code(translation.Delete, translation_pb2.DeleteRequest(engine_id="wa-1")) == grpc.StatusCode.NOT_FOUND
    )

    other = (("x-api-key", api.api_key(owner="owner-b", scopes=ALL_SCOPES)),)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Delete(engine_pb2.DeleteRequest(engine_id="wa-1"), metadata=other)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    stub.Delete(engine_pb2.DeleteRequest(engine_id="wa-1"), metadata=key)
    assert owner.get(f"{WA}/wa-1").status_code == 404


def _file_location(client: httpx.Client, lines: list[str]) -> str:
    response = client.post(
        "/files", data={"format": "Text", "name": "MAT.txt"}, files={"file": ("MAT.txt", text(lines))}
    )
    assert response.status_code == 201, response.text
    return f"files/{response.json()['id']}"


def test_webhook_events_are_word_alignment_events(api: RunningApi, owner: httpx.Client) -> None:
    events = ["WordAlignmentBuildStarted", "WordAlignmentBuildFinished", "TranslationBuildFinished"]
    hook = owner.post(
        "/hooks", json={"payloadUrl": "https://example.com/hook", "secret": "s", "events": events}
    )
    assert hook.status_code == 201, hook.text
    engine_id, _ = bible_engine(owner)
    build = start(owner, engine_id)
    job = Job(api, build)
    job.started()
    job.completed()
    done = owner.get(f"{WA}/{engine_id}/builds/{build['id']}", params={"min-revision": 3})
    assert done.json()["state"] == "Completed"

    assert api.service.services is not None
    db = api.service.services.db

    async def bodies() -> list[tuple[str, dict[str, Any]]]:
        async with db.session() as s:
            rows = (await s.scalars(select(WebhookDeliveryRow).order_by(WebhookDeliveryRow.created_at))).all()
            return [(row.event, json.loads(row.body)) for row in rows]

    delivered = api.run(bodies())
    assert [event for event, _ in delivered] == ["WordAlignmentBuildStarted", "WordAlignmentBuildFinished"]
    finished = delivered[1][1]
    assert finished["event"] == "WordAlignmentBuildFinished"
    assert finished["payload"]["buildState"] == "Completed"
    assert finished["payload"]["build"]["url"].endswith(
        f"/word-alignment/engines/{engine_id}/builds/{build['id']}"
    )
    assert finished["payload"]["engine"]["url"].endswith(f"/word-alignment/engines/{engine_id}")


def test_align_is_served_by_a_node_of_the_statistical_family(api: RunningApi, owner: httpx.Client) -> None:
    """A node that claims `statistical` in Hello gets the pair (an nmt-only node never does), loads
    the engine's revision, and its WordAlignmentResult is the answer, over REST and gRPC."""
    engine_id = wa_engine(owner)["id"]
    job = Job(api, start(owner, engine_id, {"trainOn": [], "wordAlignOn": []}))
    job.started()
    job.completed()
    token = new_node_token(api)
    aligner, translator = ScriptedNode(api.grpc_target, token), ScriptedNode(api.grpc_target, token)
    families = {"aligner": [node_pb2.ENGINE_FAMILY_STATISTICAL], "translator": [node_pb2.ENGINE_FAMILY_NMT]}
    try:
        for node, node_id in ((aligner, "aligner"), (translator, "translator")):
            node.send(
                hello=node_pb2.Hello(
                    protocol_version=node_pb2.PROTOCOL_VERSION_2,
                    node_id=node_id,
                    device=node_pb2.DeviceInfo(kind="cpu", compute_type="int8"),
                    free_slots=4,
                    slots=4,
                    families=families[node_id],
                )
            )
            assert node.read().HasField("welcome")
            node.keep_alive()
        pair = {"sourceSegment": "In the beginning", "targetSegment": "Hapo mwanzo"}
        result = node_pb2.WordAlignmentResult(
            source_tokens=["In", "the", "beginning"],
            target_tokens=["Hapo", "mwanzo"],
            alignment=[node_pb2.AlignedWordPair(source_index=2, target_index=1, score=0.75)],
        )
        stub = engine_pb2_grpc.WordAlignmentEngineApiStub(api.channel)
        key = (("x-api-key", api.api_key(scopes=ALL_SCOPES)),)
        request = engine_pb2.GetWordAlignmentRequest(
            engine_type="Statistical", engine_id=engine_id, source_segment="a b", target_segment="x"
        )
        with ThreadPoolExecutor(2) as pool:
            answer = pool.submit(owner.post, f"{WA}/{engine_id}/align", json=pair)
            load = aligner.read().load_model.model
            assert (load.engine_id, load.revision) == (engine_id, 1)
            aligner.send(model_status=node_pb2.ModelStatus(model=load, state=node_pb2.MODEL_STATE_READY))
            item = aligner.read().work
            assert (item.align.source_segment, item.align.target_segment) == (
                pair["sourceSegment"],
                pair["targetSegment"],
            )
            aligner.send(result=node_pb2.WorkResult(request_id=item.request_id, alignment=result))
            response = answer.result(timeout=30)

            over_grpc = pool.submit(stub.GetWordAlignment.with_call, request, metadata=key)
            item = aligner.read().work
            assert item.align.source_segment == "a b"
            aligner.send(result=node_pb2.WorkResult(request_id=item.request_id, alignment=result))
            reply, call = over_grpc.result(timeout=30)
        assert response.status_code == 200, response.text
        assert response.headers["X-Model-Revision"] == "1"
        assert response.json() == {
            "sourceTokens": ["In", "the", "beginning"],
            "targetTokens": ["Hapo", "mwanzo"],
            "alignment": [{"sourceIndex": 2, "targetIndex": 1, "score": 0.75}],
        }
        assert reply.result == engine_pb2.WordAlignmentResult(
            source_tokens=["In", "the", "beginning"],
            target_tokens=["Hapo", "mwanzo"],
            alignment=[common_pb2.AlignedWordPair(source_index=2, target_index=1, score=0.75)],
        )
        assert ("x-model-revision", "1") in call.trailing_metadata()
        assert all(not message.HasField("work") for message in _drained(translator))
    finally:
        aligner.close()
        translator.close()


def _drained(node: ScriptedNode) -> list[Any]:
    """What the node was sent and the test has not read."""
    messages = []
    while not node.inbox.empty():
        message = node.inbox.get()
        if not isinstance(message, grpc.RpcError):
            messages.append(message)
    return messages


def test_platform_build_reports(api: RunningApi, owner: httpx.Client) -> None:
    """The build RPCs WordAlignmentPlatformApi shares with TranslationPlatformApi, on a word-alignment
    build: a restart drops the rows streamed so far, a fault keeps the current model's rows."""
    engine_id, pc_id = bible_engine(owner)
    rows_url = f"{WA}/{engine_id}/corpora/{pc_id}/word-alignments"
    first = start(owner, engine_id)
    job = Job(api, first)
    job.started()
    pairs = export(api, first["id"])
    job.insert(pairs)
    job.stub.BuildRestarting(platform_pb2.BuildRestartingRequest(build_id=first["id"]), metadata=job.metadata)
    assert owner.get(f"{WA}/{engine_id}/builds/{first['id']}").json()["state"] == "Pending"
    assert stored_word_alignments(api) == 0, "a restarted build sends its rows again"
    job.started()
    job.insert(pairs)
    job.stub.IncrementEngineCorpusSize(
        platform_pb2.IncrementEngineCorpusSizeRequest(engine_id=engine_id, count=2), metadata=job.metadata
    )
    assert owner.get(f"{WA}/{engine_id}").json()["corpusSize"] == 2
    job.completed()
    assert len(owner.get(rows_url).json()) == 2

    faulted = start(owner, engine_id)
    job = Job(api, faulted)
    job.started()
    job.insert(pairs[:1])
    job.stub.BuildFaulted(
        platform_pb2.BuildFaultedRequest(build_id=faulted["id"], message="aligner crashed"),
        metadata=job.metadata,
    )
    build = owner.get(f"{WA}/{engine_id}/builds/{faulted['id']}").json()
    assert (build["state"], build["message"]) == ("Faulted", "aligner crashed")
    assert len(owner.get(rows_url).json()) == 2 and stored_word_alignments(api) == 2

    canceled = start(owner, engine_id)
    job = Job(api, canceled)
    job.stub.BuildCanceled(platform_pb2.BuildCanceledRequest(build_id=canceled["id"]), metadata=job.metadata)
    assert owner.get(f"{WA}/{engine_id}/builds/{canceled['id']}").json()["state"] == "Canceled"
    assert owner.get(f"{WA}/{engine_id}").json()["modelRevision"] == 1
