"""Serval's controller-level integration tests, replayed over this service's REST API (and gRPC
where a build starts there too): each request as Serval's test sends it, the status and what the
body says as Serval answers.

Serval's cases come from `src/Serval/test/Serval.ApiServer.IntegrationTests/` (sillsdev/serval):

- `TranslationEngineTests.GetNextFinishedBuildAsync`: `finished-after` is a build id (none: from
  now), `GetNextFinishedBuild.cs`. Serval has no word-alignment builds feed, so neither has this
  service. Where we differ: `finished-after` may also be a date-time (our extension), and a value
  shaped like a date that is no date answers 400.
- Build options, `StartBuildForEngineByIdAsync` (201), `StartBuildAsync_ParallelCorpus`,
  `StartBuildAsync_Corpus_NoFilter`, `StartBuildAsync_ParallelCorpus_NoFilter` and
  `StartBuildForEngineAsync_UnparsableOptions` of `TranslationEngineTests` and
  `WordAlignmentEngineTests`: any JSON object is accepted and passed on (`StartBuild.cs`
  `MapOptions`); an engine corpus's `sourceFilters` / `targetFilters` are ignored. Where we
  differ: the keys an engine type does not take are named in the build's diagnostics
  (`CONFIG-1003`), and a known key with a bad value is refused (Serval's tests never send one).
- Corpora without files, `AddParallelCorpusAsync_EmptyCorpus`,
  `StartBuildForEngineAsync_EmptyParallelCorpus`, `StartBuildForEngineAsync_EmptyCorpus`,
  `GetPretranslatedUsfmAsync_EmptyParallelCorpus`, `GetCorpusPretranslatedUsfmAsync_EmptyCorpus`
  and the word-alignment `AddParallelCorpusAsync_EmptyParallelCorpus`,
  `StartBuildForEngineAsync_EmptyCorpus` (`AddParallelCorpus.cs`, `StartBuild.cs`). Serval's tests
  strip the files from the engine's copy of the corpus; here the client deletes the data files,
  which removes them from every corpus that names them.
- Parallel corpora with no corpora, `StartBuildForEngineAsync_NoCorporaTranslating`,
  `StartBuildForEngineAsync_NoCorporaTraining`, `GetPretranslatedUsfmAsync_NoCorpora` and the
  word-alignment `StartBuildForEngineAsync_NoCorporaAligning` / `NoCorporaTraining`: created (201),
  refused when a build or a USFM download uses them (`StartBuild.cs`, `UsfmGenerationService.cs`).
- Language info, `GetLanguageInfoAsync` and `GetLanguageInfo_Error`, answered by the real engine
  services (`NmtEngineService`, `SmtTransferEngineService`, `EchoTranslationEngineService`, and
  `LanguageTagServiceTests.cs` for the tags; the table itself is in `tests/test_languages.py`).
  Serval's test of `invalid_language` → 400 uses a mocked engine; its real `nmt` engine answers
  200, not native, for any tag of letters, digits, `-` and `_`, and so does this service. Where we
  differ: `smt-transfer` and `echo` refuse (400) what no tag can be, as `nmt` does; Serval's take any text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import update

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES, READ_FILES
from serval_api.db.models import BuildRow
from tests.api.conftest import RunningApi, create_engine, wait_for_build

WA = "/word-alignment/engines"
NEXT = "/translation/builds/next-finished"
SERVAL_OPTIONS = """{"max_steps":10,
"use_key_terms":false,
"some_double":10.5,
"some_nested": {"more_nested": {"other_double":10.5}},
"some_string":"string"}"""
"""What Serval's tests send as `options`: a string holding a JSON object (`TranslationBuildConfig.Options`)."""
NOT_OURS = ["use_key_terms", "some_double", "some_nested", "some_string"]
UNKNOWN_ID = "b00000000000000000000001"


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as client:
        yield client


def upload(client: httpx.Client, name: str, lines: list[str]) -> str:
    data = "".join(f"{line}\n" for line in lines).encode()
    response = client.post("/files", data={"format": "Text", "name": name}, files={"file": (name, data)})
    assert response.status_code == 201, response.text
    file_id: str = response.json()["id"]
    return file_id


def corpus(client: httpx.Client, file_ids: list[str], language: str = "en") -> str:
    files = [{"fileId": f, "textId": "all"} for f in file_ids]
    response = client.post("/corpora", json={"language": language, "files": files})
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


class World:
    """Serval's test set-up: a source and a target Text file, a corpus of each (`all`), a second
    source corpus, and a corpus without files."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.src_file = upload(client, "src.txt", ["Hello.", "World."])
        self.trg_file = upload(client, "trg.txt", ["Hola.", "Mundo."])
        self.source = corpus(client, [self.src_file])
        self.source2 = corpus(client, [self.src_file])
        self.target = corpus(client, [self.trg_file], "es")
        self.empty = corpus(client, [])

    def parallel_corpus(self, engines: str, engine_id: str, source: list[str], target: list[str]) -> Any:
        return self.client.post(
            f"{engines}/{engine_id}/parallel-corpora",
            json={"sourceCorpusIds": source, "targetCorpusIds": target},
        )

    def engine_corpus(self, engine_id: str) -> str:
        """Serval's `TestCorpusConfig`: an engine corpus of the two files, text id `all`."""
        body = {
            "name": "TestCorpus",
            "sourceLanguage": "en",
            "targetLanguage": "es",
            "sourceFiles": [{"fileId": self.src_file, "textId": "all"}],
            "targetFiles": [{"fileId": self.trg_file, "textId": "all"}],
        }
        response = self.client.post(f"/translation/engines/{engine_id}/corpora", json=body)
        assert response.status_code == 201, response.text
        corpus_id: str = response.json()["id"]
        return corpus_id


@pytest.fixture
def world(owner: httpx.Client) -> World:
    return World(owner)


def wa_engine(client: httpx.Client, engine_type: str = "statistical") -> str:
    body = {"sourceLanguage": "en", "targetLanguage": "es", "type": engine_type}
    response = client.post(WA, json=body)
    assert response.status_code == 201, response.text
    engine_id: str = response.json()["id"]
    return engine_id


def message(response: httpx.Response) -> str:
    text: str = response.json()["message"]
    return text


def diagnostic(build: dict[str, Any], code: str) -> dict[str, Any]:
    found = [d for d in build["executionData"]["diagnostics"] if d["code"] == code]
    assert len(found) == 1, build["executionData"]
    return found[0]


def finished_at(api: RunningApi, build_id: str, when: datetime) -> None:
    """Serval's test inserts builds with a `DateFinished`; here a real build's is moved."""
    assert api.service.services is not None
    db = api.service.services.db

    async def write() -> None:
        async with db.session() as s:
            await s.execute(update(BuildRow).where(BuildRow.id == build_id).values(date_finished=when))

    api.run(write())


def built_echo_engine(client: httpx.Client) -> str:
    """An echo engine whose build completed (Serval's tests set `ModelRevision` to 1)."""
    engine_id: str = create_engine(client, "echo")["id"]
    started = client.post(f"/translation/engines/{engine_id}/builds", json={"trainOn": []})
    assert started.status_code == 201, started.text
    assert wait_for_build(client, started.json())["state"] == "Completed"
    return engine_id


# ---- TranslationEngineTests.GetNextFinishedBuildAsync ------------------------------------------


def test_next_finished_takes_a_build_id_as_serval(api: RunningApi, owner: httpx.Client) -> None:
    first, second = (
        wait_for_build(owner, owner.post(f"/translation/engines/{e}/builds", json={}).json())
        for e in (create_engine(owner, "echo")["id"], create_engine(owner, "echo")["id"])
    )
    now = datetime.now(UTC)
    finished_at(api, first["id"], now + timedelta(hours=1))
    finished_at(api, second["id"], now + timedelta(hours=2))

    # [TestCase(ReadTranslationEngines, 200, null)]: from now, the first to finish.
    answer = owner.get(NEXT)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["id"], answer.json()["state"]) == (first["id"], "Completed")
    # [TestCase(ReadTranslationEngines, 200, BUILD1_ID)]: the next to finish after that build.
    answer = owner.get(NEXT, params={"finished-after": first["id"]})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["id"], answer.json()["state"]) == (second["id"], "Completed")
    # [TestCase(ReadFiles, 403, null)]
    with api.client(scopes=(READ_FILES,)) as unscoped:
        assert unscoped.get(NEXT).status_code == 403

    # [TestCase(ReadTranslationEngines, 408, null)]: both finished in the past.
    finished_at(api, first["id"], now - timedelta(hours=1))
    finished_at(api, second["id"], now - timedelta(hours=2))
    assert owner.get(NEXT).status_code == 408
    # Serval waits from now for an id it does not find: unknown, or another owner's.
    assert owner.get(NEXT, params={"finished-after": UNKNOWN_ID}).status_code == 408
    with api.client("owner-b") as other:
        assert other.get(NEXT, params={"finished-after": second["id"]}).status_code == 408
    assert owner.get(NEXT, params={"finished-after": second["id"]}).json()["id"] == first["id"]

    # Ours: a date-time; one shaped like a date that is none is 400.
    earlier = (now - timedelta(hours=3)).strftime("%Y-%m-%d %H:%M:%SZ")
    assert owner.get(NEXT, params={"finished-after": earlier}).json()["id"] == second["id"]
    bad = owner.get(NEXT, params={"finished-after": "2024-13-01"})
    assert bad.status_code == 400 and "finished-after" in message(bad)

    # Builds that finished at the same time follow one another by id, as Serval orders them.
    same = now + timedelta(hours=3)
    finished_at(api, first["id"], same)
    finished_at(api, second["id"], same)
    low, high = sorted((first["id"], second["id"]))
    assert owner.get(NEXT).json()["id"] == low
    assert owner.get(NEXT, params={"finished-after": low}).json()["id"] == high


# ---- build options: any JSON object, passed on --------------------------------------------------


def test_translation_builds_accept_servals_options(
    api: RunningApi, owner: httpx.Client, world: World
) -> None:
    # StartBuildForEngineByIdAsync 201: an echo engine, an engine corpus, options as a string.
    echo = create_engine(owner, "echo", targetLanguage="es")["id"]
    ec = world.engine_corpus(echo)
    build = owner.post(
        f"/translation/engines/{echo}/builds",
        json={
            "pretranslate": [{"corpusId": ec, "textIds": ["all"]}],
            "trainOn": [{"corpusId": ec, "textIds": ["all"]}],
            "options": SERVAL_OPTIONS,
        },
    )
    assert build.status_code == 201, build.text
    assert build.json()["options"] == json.loads(SERVAL_OPTIONS), "kept, read back as the object"
    assert diagnostic(build.json(), "CONFIG-1003")["data"]["ignoredOptions"] == NOT_OURS
    current = owner.get(f"/translation/engines/{echo}/current-build", params={"min-revision": 1})
    assert current.status_code == 200 and current.json()["deploymentVersion"]
    # StartBuildForEngineByIdAsync 400: an unknown corpus.
    wait_for_build(owner, build.json())
    unknown = owner.post(
        f"/translation/engines/{echo}/builds",
        json={"pretranslate": [{"corpusId": "cccccccccccccccccccccccc", "textIds": ["all"]}]},
    )
    assert unknown.status_code == 400

    # StartBuildAsync_ParallelCorpus: an nmt engine, filters naming the parallel corpus's corpora.
    nmt = create_engine(owner, targetLanguage="es")["id"]
    pc = world.parallel_corpus("/translation/engines", nmt, [world.source], [world.target]).json()["id"]
    started = owner.post(
        f"/translation/engines/{nmt}/builds",
        json={
            "pretranslate": [
                {"parallelCorpusId": pc, "sourceFilters": [{"corpusId": world.source, "textIds": ["all"]}]}
            ],
            "trainOn": [
                {
                    "parallelCorpusId": pc,
                    "sourceFilters": [{"corpusId": world.source, "textIds": ["all"]}],
                    "targetFilters": [{"corpusId": world.target, "textIds": ["all"]}],
                }
            ],
            "options": SERVAL_OPTIONS,
        },
    )
    assert started.status_code == 201, started.text
    assert owner.get(f"/translation/engines/{nmt}/current-build").status_code == 200
    options = json.loads(api.launcher.specs[-1].options_json)
    assert options == json.loads(SERVAL_OPTIONS), "passed on to the job, every key"
    note = diagnostic(started.json(), "CONFIG-1003")
    assert note["severity"] == "Warn" and note["data"]["ignoredOptions"] == NOT_OURS
    assert note["message"].startswith("build options 'use_key_terms', 'some_double', 'some_nested', ")
    assert note["message"] in started.json()["executionData"]["warnings"]
    assert owner.post(f"/translation/engines/{nmt}/current-build/cancel").status_code == 200

    # StartBuildAsync_ParallelCorpus_NoFilter: filters without texts; the build reads back as sent.
    no_filter = owner.post(
        f"/translation/engines/{nmt}/builds",
        json={
            "pretranslate": [{"parallelCorpusId": pc, "sourceFilters": [{"corpusId": world.source}]}],
            "trainOn": [
                {
                    "parallelCorpusId": pc,
                    "sourceFilters": [{"corpusId": world.source}],
                    "targetFilters": [{"corpusId": world.target}],
                }
            ],
            "options": SERVAL_OPTIONS,
        },
    )
    assert no_filter.status_code == 201, no_filter.text
    for entry in (no_filter.json()["trainOn"][0], no_filter.json()["pretranslate"][0]):
        assert "textIds" not in entry and "scriptureRange" not in entry
    assert owner.post(f"/translation/engines/{nmt}/current-build/cancel").status_code == 200

    # StartBuildAsync_Corpus_NoFilter: an engine corpus named with side filters, which are ignored.
    ec = world.engine_corpus(nmt)
    filtered = owner.post(
        f"/translation/engines/{nmt}/builds",
        json={
            "pretranslate": [{"corpusId": ec, "sourceFilters": [{"corpusId": world.source}]}],
            "trainOn": [
                {
                    "corpusId": ec,
                    "sourceFilters": [{"corpusId": world.source}],
                    "targetFilters": [{"corpusId": world.target}],
                }
            ],
            "options": SERVAL_OPTIONS,
        },
    )
    assert filtered.status_code == 201, filtered.text
    body = filtered.json()
    assert len(body["trainOn"]) == len(body["pretranslate"]) == 1
    for entry in (body["trainOn"][0], body["pretranslate"][0]):
        assert entry["corpus"]["id"] == ec
        assert not {"textIds", "scriptureRange", "sourceFilters", "targetFilters"} & set(entry)
    assert body["executionData"]["trainCount"] == 2, "all of the engine corpus"
    ignored = [d for d in body["executionData"]["diagnostics"] if d["data"].get("corpusId") == ec]
    assert [d["message"] for d in ignored] == [
        f"trainOn[0]: corpus {ec} is an engine corpus, so its sourceFilters and targetFilters were "
        "ignored; choose its texts with textIds or scriptureRange",
        f"pretranslate[0]: corpus {ec} is an engine corpus, so its sourceFilters were ignored; choose "
        "its texts with textIds or scriptureRange",
    ]


def test_word_alignment_builds_accept_servals_options(
    api: RunningApi, owner: httpx.Client, world: World
) -> None:
    """`WordAlignmentEngineTests`: StartBuildForEngineByIdAsync 201 (echo), StartBuildAsync_ParallelCorpus
    and StartBuildAsync_ParallelCorpus_NoFilter (statistical)."""
    for engine_type, with_texts in (
        ("echo-word-alignment", True),
        ("statistical", True),
        ("statistical", False),
    ):
        engine_id = wa_engine(owner, engine_type)
        pc = world.parallel_corpus(WA, engine_id, [world.source], [world.target]).json()["id"]
        texts = {"textIds": ["all"]} if with_texts else {}
        entry = {
            "parallelCorpusId": pc,
            "sourceFilters": [{"corpusId": world.source, **texts}],
            "targetFilters": [{"corpusId": world.target, **texts}],
        }
        build = owner.post(
            f"{WA}/{engine_id}/builds",
            json={"wordAlignOn": [entry], "trainOn": [entry], "options": SERVAL_OPTIONS},
        )
        assert build.status_code == 201, (engine_type, build.text)
        assert build.json()["options"] == json.loads(SERVAL_OPTIONS)
        assert diagnostic(build.json(), "CONFIG-1003")["data"]["ignoredOptions"] == [
            "max_steps",
            *NOT_OURS,
        ], "a statistical aligner takes no max_steps"
        current = owner.get(f"{WA}/{engine_id}/current-build", params={"min-revision": 1})
        assert current.status_code == 200 and current.json()["deploymentVersion"]
        if not with_texts:
            assert (
                build.json()["trainOn"][0]["sourceFilters"]
                and build.json()["wordAlignOn"][0]["targetFilters"]
            )


@pytest.mark.parametrize("engines", ["/translation/engines", WA])
def test_unparsable_options_are_400_in_servals_words(owner: httpx.Client, world: World, engines: str) -> None:
    """StartBuildForEngineAsync_UnparsableOptions; a known key with a bad value is refused too (ours)."""
    engine_id = (
        create_engine(owner, "echo")["id"] if engines != WA else wa_engine(owner, "echo-word-alignment")
    )
    answer = owner.post(f"{engines}/{engine_id}/builds", json={"options": "unparsable json"})
    assert answer.status_code == 400
    assert "Unable to parse field 'options'" in message(answer)
    assert "send a JSON object or a string that holds one" in message(answer)
    bad_value = {"maxSteps": 0} if engines != WA else {"iterations": 0}
    refused = owner.post(f"{engines}/{engine_id}/builds", json={"options": bad_value})
    assert refused.status_code == 400 and next(iter(bad_value)) in message(refused)
    assert owner.get(f"{engines}/{engine_id}/builds").json() == []


def test_grpc_start_build_takes_any_options_object(api: RunningApi, owner: httpx.Client) -> None:
    engine_id = create_engine(owner)["id"]
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    metadata = (("x-api-key", api.api_key(scopes=ALL_SCOPES)),)
    stub.StartBuild(
        engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=engine_id, options=SERVAL_OPTIONS),
        metadata=metadata,
    )
    build = owner.get(f"/translation/engines/{engine_id}/current-build").json()
    assert diagnostic(build, "CONFIG-1003")["data"]["ignoredOptions"] == NOT_OURS
    assert json.loads(api.launcher.specs[-1].options_json) == json.loads(SERVAL_OPTIONS)
    owner.post(f"/translation/engines/{engine_id}/current-build/cancel")
    with pytest.raises(grpc.RpcError) as error:
        stub.StartBuild(
            engine_pb2.StartBuildRequest(engine_type="Nmt", engine_id=engine_id, options="unparsable json"),
            metadata=metadata,
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Unable to parse field 'options'" in (error.value.details() or "")


# ---- corpora without files ------------------------------------------------------------------


@pytest.mark.parametrize("engines", ["/translation/engines", WA])
def test_a_parallel_corpus_of_a_corpus_without_files_is_400(
    owner: httpx.Client, world: World, engines: str
) -> None:
    """AddParallelCorpusAsync_EmptyCorpus / AddParallelCorpusAsync_EmptyParallelCorpus."""
    engine_id = (
        create_engine(owner, "echo")["id"] if engines != WA else wa_engine(owner, "echo-word-alignment")
    )
    answer = world.parallel_corpus(engines, engine_id, [world.empty], [world.target])
    assert answer.status_code == 400
    assert message(answer) == (
        f"sourceCorpusIds[0]: the corpus {world.empty} does not have any files associated with it; "
        "add files to it first"
    )
    assert owner.get(f"{engines}/{engine_id}/parallel-corpora").json() == []


@pytest.mark.parametrize("engines", ["/translation/engines", WA])
def test_training_on_a_corpus_that_lost_its_files_is_400(
    api: RunningApi, owner: httpx.Client, world: World, engines: str
) -> None:
    """StartBuildForEngineAsync_EmptyParallelCorpus (translation), StartBuildForEngineAsync_EmptyCorpus
    (word alignment): the source corpus's only file deleted."""
    engine_id = (
        create_engine(owner, "echo")["id"] if engines != WA else wa_engine(owner, "echo-word-alignment")
    )
    pc = world.parallel_corpus(engines, engine_id, [world.source], [world.target]).json()["id"]
    assert owner.delete(f"/files/{world.src_file}").status_code == 200
    answer = owner.post(f"{engines}/{engine_id}/builds", json={"trainOn": [{"parallelCorpusId": pc}]})
    assert answer.status_code == 400
    assert message(answer) == (
        f"trainOn[0]: the corpus {world.source} referenced in parallel corpus {pc} does not have any "
        "files associated with it; add files to that corpus or leave the parallel corpus out"
    )
    assert owner.get(f"{engines}/{engine_id}/builds").json() == []


def test_an_engine_corpus_that_lost_its_files(owner: httpx.Client, world: World) -> None:
    """StartBuildForEngineAsync_EmptyCorpus and GetCorpusPretranslatedUsfmAsync_EmptyCorpus (400),
    and GetPretranslatedUsfmAsync_EmptyParallelCorpus (400)."""
    engine_id = built_echo_engine(owner)
    ec = world.engine_corpus(engine_id)
    pc = world.parallel_corpus("/translation/engines", engine_id, [world.source], [world.target]).json()["id"]
    for file_id in (world.src_file, world.trg_file):
        assert owner.delete(f"/files/{file_id}").status_code == 200
    base = f"/translation/engines/{engine_id}"
    answer = owner.post(f"{base}/builds", json={"trainOn": [{"corpusId": ec}]})
    assert answer.status_code == 400
    assert message(answer) == (
        f"trainOn[0]: the corpus {ec} is not valid: it does not have any source or target files; "
        "give it files (PATCH its sourceFiles or targetFiles) or leave it out"
    )
    assert owner.get(f"{base}/corpora/{ec}/pretranslations/MAT/usfm").status_code == 400
    assert owner.get(f"{base}/parallel-corpora/{pc}/pretranslations/MAT/usfm").status_code == 400


# ---- parallel corpora with no corpora ----------------------------------------------------------


@pytest.mark.parametrize("engines", ["/translation/engines", WA])
def test_a_parallel_corpus_with_no_corpora(owner: httpx.Client, world: World, engines: str) -> None:
    """StartBuildForEngineAsync_NoCorporaTranslating / NoCorporaAligning and NoCorporaTraining:
    created (201), refused (400) by a build that names it to infer on or to train on."""
    engine_id = (
        create_engine(owner, "echo")["id"] if engines != WA else wa_engine(owner, "echo-word-alignment")
    )
    created = world.parallel_corpus(engines, engine_id, [], [])
    assert created.status_code == 201, created.text
    assert (created.json()["sourceCorpora"], created.json()["targetCorpora"]) == ([], [])
    pc = created.json()["id"]
    inference = "pretranslate" if engines != WA else "wordAlignOn"
    for field in (inference, "trainOn"):
        answer = owner.post(f"{engines}/{engine_id}/builds", json={field: [{"parallelCorpusId": pc}]})
        assert answer.status_code == 400, (field, answer.text)
        assert message(answer) == (
            f"{field}[0]: the parallel corpus {pc} does not have source or target corpora associated with "
            "it; give it corpora (PATCH its sourceCorpusIds and targetCorpusIds) or leave it out"
        )
    assert owner.get(f"{engines}/{engine_id}/builds").json() == []


def test_usfm_of_a_parallel_corpus_with_no_corpora_is_400(owner: httpx.Client, world: World) -> None:
    """GetPretranslatedUsfmAsync_NoCorpora."""
    engine_id = built_echo_engine(owner)
    pc = world.parallel_corpus("/translation/engines", engine_id, [], []).json()["id"]
    answer = owner.get(f"/translation/engines/{engine_id}/parallel-corpora/{pc}/pretranslations/MAT/usfm")
    assert answer.status_code == 400
    assert message(answer) == (
        f"the parallel corpus {pc} has no source corpora; give it a source corpus (PATCH its "
        "sourceCorpusIds) to draft USFM from"
    )


# ---- language info -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine_type", "language", "body"),
    [
        ("Nmt", "zh-TW", {"engineType": "nmt", "isNative": True, "internalCode": "zho_Hant"}),
        ("nmt", "ms", {"engineType": "nmt", "isNative": True, "internalCode": "zsm_Latn"}),
        ("Nmt", "xyz-Latn", {"engineType": "nmt", "isNative": False, "internalCode": "xyz_Latn"}),
        ("Nmt", "unknown", {"engineType": "nmt", "isNative": False, "internalCode": "unknown"}),
        (
            "Nmt",
            "invalid_language",
            {"engineType": "nmt", "isNative": False, "internalCode": "invalid_language"},
        ),
        (
            "SmtTransfer",
            "Alphabet",
            {"engineType": "smt-transfer", "isNative": True, "internalCode": "Alphabet"},
        ),
        ("Echo", "Alphabet", {"engineType": "echo", "isNative": True, "internalCode": "Alphabet_echo"}),
    ],
)
def test_language_info_as_servals_engines(
    owner: httpx.Client, engine_type: str, language: str, body: dict[str, Any]
) -> None:
    answer = owner.get(f"/translation/engine-types/{engine_type}/languages/{language}")
    assert answer.status_code == 200, answer.text
    assert answer.json() == body


def test_language_info_errors(api: RunningApi, owner: httpx.Client) -> None:
    """GetLanguageInfo_Error: another scope 403, no such engine type 404 (a word-alignment type is
    none of the translation engine types either); what no tag can be 400."""
    with api.client(scopes=(READ_FILES,)) as unscoped:
        assert unscoped.get("/translation/engine-types/Nmt/languages/abc").status_code == 403
    for engine_type in ("invalid_engine", "statistical"):
        answer = owner.get(f"/translation/engine-types/{engine_type}/languages/en")
        assert answer.status_code == 404 and engine_type in message(answer)
    for engine_type in ("Nmt", "Echo", "SmtTransfer"):
        answer = owner.get(f"/translation/engine-types/{engine_type}/languages/'Invalid Language'")
        assert answer.status_code == 400
        assert "is not a language tag" in message(answer)
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    metadata = (("x-api-key", api.api_key()),)
    echo = stub.GetLanguageInfo(
        engine_pb2.GetLanguageInfoRequest(engine_type="Echo", language="en"), metadata=metadata
    )
    assert (echo.internal_code, echo.is_native) == ("en_echo", True)
    with pytest.raises(grpc.RpcError) as error:
        stub.GetLanguageInfo(
            engine_pb2.GetLanguageInfoRequest(engine_type="invalid_engine", language="en"), metadata=metadata
        )
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
