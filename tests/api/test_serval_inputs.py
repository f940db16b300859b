"""What SIL's `Serval.Client` sends that Serval accepts: build options as a string of JSON
(`TranslationBuildConfig.options` is `object`; Serval's `StartBuild` parses `options.ToString()`),
and parallel corpora with no target corpora (books to draft that have no translation yet)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.service.file_contents import contents_key
from tests.api.conftest import RunningApi, create_engine, wait_for_build
from tests.api.file_rows import chunk_count

WA = "/word-alignment/engines"


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def wa_engine(client: httpx.Client) -> dict[str, Any]:
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
    response = client.post(WA, json=body)
    assert response.status_code == 201, response.text
    engine: dict[str, Any] = response.json()
    return engine


@pytest.mark.parametrize("kind", ["translation", "word-alignment"])
def test_build_options_may_be_a_string_holding_json(api: RunningApi, owner: httpx.Client, kind: str) -> None:
    if kind == "translation":
        builds = f"/translation/engines/{create_engine(owner)['id']}/builds"
        options = {"maxSteps": 7, "freeze": ["encoder"]}
    else:
        builds = f"{WA}/{wa_engine(owner)['id']}/builds"
        options = {"modelType": "ibm1", "lowercase": False}
    response = owner.post(builds, json={"options": json.dumps(options)})
    assert response.status_code == 201, response.text
    build = response.json()
    assert build["options"] == options, "read back as the object, not the string"
    assert owner.get(f"{builds}/{build['id']}").json()["options"] == options
    assert json.loads(api.launcher.specs[-1].options_json) == options


@pytest.mark.parametrize("kind", ["translation", "word-alignment"])
@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("maxSteps=7", "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "holds an array"),
        ('"{}"', "holds a string"),
        ("7", "holds a number"),
        (7, "not a number"),
        ([{"maxSteps": 7}], "not an array"),
        (True, "not a boolean"),
    ],
)
def test_build_options_that_are_no_json_object_are_400(
    api: RunningApi, owner: httpx.Client, kind: str, options: Any, says: str
) -> None:
    if kind == "translation":
        builds = f"/translation/engines/{create_engine(owner)['id']}/builds"
    else:
        builds = f"{WA}/{wa_engine(owner)['id']}/builds"
    response = owner.post(builds, json={"options": options})
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert message.startswith("invalid request: options: ") and says in message
    assert "JSON object" in message, "the message says what to send"
    assert owner.get(builds).json() == [] and api.launcher.specs == []


def test_a_string_of_options_is_checked_like_the_object(owner: httpx.Client) -> None:
    """A bad value of a known key is refused either way (unknown keys are accepted, as Serval does:
    `test_serval_integration.py`)."""
    builds = f"/translation/engines/{create_engine(owner)['id']}/builds"
    as_object = owner.post(builds, json={"options": {"maxSteps": "many"}})
    as_string = owner.post(builds, json={"options": '{"maxSteps": "many"}'})
    assert as_object.status_code == as_string.status_code == 400
    assert as_object.json() == as_string.json()
    assert "maxSteps" in as_object.json()["message"]


def upload(client: httpx.Client, name: str, lines: list[str]) -> str:
    data = "".join(f"{line}\n" for line in lines).encode()
    response = client.post("/files", data={"format": "Text", "name": name}, files={"file": (name, data)})
    assert response.status_code == 201, response.text
    file_id: str = response.json()["id"]
    return file_id


def corpus(client: httpx.Client, language: str, files: dict[str, list[str]]) -> str:
    refs = [{"fileId": upload(client, name, lines)} for name, lines in files.items()]
    response = client.post("/corpora", json={"language": language, "files": refs})
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


MAT = ["In the beginning.", "And then.", "At last."]
SWH_MAT = ["Hapo mwanzo.", "Kisha.", "Mwishowe."]
MRK = ["The gospel.", "As written."]


def pretranslate_rows(api: RunningApi, build_id: str) -> list[dict[str, Any]]:
    assert api.service.services is not None
    store = api.service.services.store
    rows: list[dict[str, Any]] = json.loads(store.read_bytes(f"builds/{build_id}/pretranslate.src.json"))
    return rows


def test_a_parallel_corpus_with_no_target_corpora_is_drafted_from_its_source(
    api: RunningApi, owner: httpx.Client
) -> None:
    engine = create_engine(owner)
    base = f"/translation/engines/{engine['id']}/parallel-corpora"
    trained = owner.post(
        base,
        json={
            "sourceCorpusIds": [corpus(owner, "en", {"MAT.txt": MAT})],
            "targetCorpusIds": [corpus(owner, "sw", {"MAT.txt": SWH_MAT})],
        },
    ).json()
    drafts_source = corpus(owner, "en", {"MRK.txt": MRK})
    response = owner.post(base, json={"sourceCorpusIds": [drafts_source], "targetCorpusIds": []})
    assert response.status_code == 201, response.text
    drafts = response.json()
    assert drafts["targetCorpora"] == [] and owner.get(drafts["url"]).json() == drafts

    build = owner.post(
        f"/translation/engines/{engine['id']}/builds",
        json={
            "trainOn": [{"parallelCorpusId": trained["id"]}],
            "pretranslate": [{"parallelCorpusId": drafts["id"]}],
        },
    )
    assert build.status_code == 201, build.text
    assert build.json()["executionData"]["trainCount"] == len(MAT)
    assert [
        (r["corpusId"], r["textId"], r["translation"]) for r in pretranslate_rows(api, build.json()["id"])
    ] == [(drafts["id"], "MRK", line) for line in MRK]

    # Omitted trainOn trains on every parallel corpus: the one with no target adds no pairs.
    assert (
        owner.post(f"/translation/engines/{engine['id']}/current-build/cancel").json()["state"] == "Canceled"
    )
    everything = owner.post(f"/translation/engines/{engine['id']}/builds", json={})
    assert everything.status_code == 201, everything.text
    assert everything.json()["executionData"]["trainCount"] == len(MAT)


def test_a_parallel_corpus_may_be_updated_to_no_target_corpora(owner: httpx.Client) -> None:
    engine = create_engine(owner)
    base = f"/translation/engines/{engine['id']}/parallel-corpora"
    source = corpus(owner, "en", {"MRK.txt": MRK})
    pc = owner.post(
        base, json={"sourceCorpusIds": [source], "targetCorpusIds": [corpus(owner, "sw", {"MRK.txt": MRK})]}
    ).json()
    patched = owner.patch(f"{base}/{pc['id']}", json={"targetCorpusIds": []})
    assert patched.status_code == 200, patched.text
    assert patched.json()["targetCorpora"] == [] and owner.get(pc["url"]).json()["targetCorpora"] == []
    no_source = owner.patch(f"{base}/{pc['id']}", json={"sourceCorpusIds": []})
    assert no_source.status_code == 200, "as Serval: a build or a USFM download that uses it is refused"
    assert no_source.json()["sourceCorpora"] == []


def test_a_word_alignment_parallel_corpus_may_have_no_target_corpora(owner: httpx.Client) -> None:
    engine = wa_engine(owner)
    base = f"{WA}/{engine['id']}/parallel-corpora"
    source = corpus(owner, "en", {"MRK.txt": MRK})
    created = owner.post(base, json={"sourceCorpusIds": [source], "targetCorpusIds": []})
    assert created.status_code == 201, created.text
    pc = created.json()
    assert pc["targetCorpora"] == [] and owner.get(f"{base}/{pc['id']}").json() == pc
    target = corpus(owner, "sw", {"MRK.txt": MRK})
    assert owner.patch(f"{base}/{pc['id']}", json={"targetCorpusIds": [target]}).status_code == 200
    emptied = owner.patch(f"{base}/{pc['id']}", json={"targetCorpusIds": []})
    assert emptied.status_code == 200 and emptied.json()["targetCorpora"] == []
    build = owner.post(f"{WA}/{engine['id']}/builds", json={"wordAlignOn": [{"parallelCorpusId": pc["id"]}]})
    assert build.status_code == 201, build.text
    assert build.json()["executionData"]["wordAlignCount"] == 0, "no target: no pairs to align"


def test_grpc_start_build_pretranslates_a_corpus_with_no_target_corpora(
    api: RunningApi, owner: httpx.Client
) -> None:
    engine = create_engine(owner)
    mrk = upload(owner, "MRK.txt", MRK)
    source = engine_pb2.MonolingualCorpus(
        id="s",
        language="en",
        pretranslate_all=True,
        files=[
            engine_pb2.CorpusFile(location=f"files/{mrk}", format=engine_pb2.FILE_FORMAT_TEXT, text_id="MRK")
        ],
    )
    request = engine_pb2.StartBuildRequest(
        engine_type="Nmt",
        engine_id=engine["id"],
        build_id="g" * 24,
        corpora=[engine_pb2.ParallelCorpus(id="drafts", source_corpora=[source], target_corpora=[])],
    )
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    stub.StartBuild(request, metadata=(("x-api-key", owner.headers["X-API-Key"]),))
    assert [(r["corpusId"], r["translation"]) for r in pretranslate_rows(api, "g" * 24)] == [
        ("drafts", line) for line in MRK
    ]
    assert api.launcher.specs[-1].train is False


def test_deleting_a_file_removes_it_from_every_corpus_that_names_it(
    api: RunningApi, owner: httpx.Client
) -> None:
    """Serval's `DataFileDeleter`: the file goes, and with it every corpus's (and engine
    corpus's) entry for it; a build already started keeps its exported copy."""
    engine = create_engine(owner)
    mat_sw, mrk_sw = upload(owner, "MAT.txt", SWH_MAT), upload(owner, "MRK.txt", MRK)
    target = owner.post(
        "/corpora", json={"language": "sw", "files": [{"fileId": mat_sw}, {"fileId": mrk_sw}]}
    )
    source = corpus(owner, "en", {"MAT.txt": MAT})
    pc = owner.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={"sourceCorpusIds": [source], "targetCorpusIds": [target.json()["id"]]},
    ).json()
    legacy = owner.post(
        f"/translation/engines/{engine['id']}/corpora",
        json={
            "sourceLanguage": "en",
            "targetLanguage": "sw",
            "sourceFiles": [{"fileId": upload(owner, "MAT.txt", MAT)}],
            "targetFiles": [{"fileId": mat_sw}, {"fileId": mrk_sw}],
        },
    ).json()
    build = owner.post(
        f"/translation/engines/{engine['id']}/builds", json={"trainOn": [{"parallelCorpusId": pc["id"]}]}
    )
    assert build.status_code == 201, build.text
    assert api.service.services is not None
    store = api.service.services.store
    exported = store.read_bytes(f"builds/{build.json()['id']}/train.trg.txt")

    with api.client("owner-b", scopes=ALL_SCOPES) as stranger:
        assert stranger.delete(f"/files/{mat_sw}").status_code == 403
    assert owner.get(f"/files/{mat_sw}").status_code == 200

    assert owner.delete(f"/files/{mat_sw}").status_code == 200
    assert owner.get(f"/files/{mat_sw}").status_code == 404
    assert chunk_count(api, mat_sw) == 0
    assert not store.exists(contents_key(mat_sw))
    after = owner.get(f"/corpora/{target.json()['id']}").json()
    assert [f["file"]["id"] for f in after["files"]] == [mrk_sw]
    assert after["revision"] == target.json()["revision"] + 1
    legacy_after = owner.get(f"/translation/engines/{engine['id']}/corpora/{legacy['id']}").json()
    assert [f["file"]["id"] for f in legacy_after["targetFiles"]] == [mrk_sw]
    assert legacy_after["sourceFiles"] == legacy["sourceFiles"]
    assert owner.get(f"/translation/engines/{engine['id']}/parallel-corpora/{pc['id']}").json() == pc
    assert store.read_bytes(f"builds/{build.json()['id']}/train.trg.txt") == exported
    assert exported.decode().split("\n")[:-1] == SWH_MAT


def test_deleting_a_file_deletes_the_pretranslations_read_from_it(owner: httpx.Client) -> None:
    """Serval's `DataFileDeleted` handler: the drafts of a parallel corpus that used the file go
    with it (they no longer match their source); another corpus's drafts stay, and so do another
    owner's."""
    engine = create_engine(owner, "echo")
    base = f"/translation/engines/{engine['id']}"
    drafted = {}
    for book, lines in (("MAT", MAT), ("MRK", MRK)):
        source = corpus(owner, "en", {f"{book}.txt": lines})
        pc = owner.post(f"{base}/parallel-corpora", json={"sourceCorpusIds": [source], "targetCorpusIds": []})
        assert pc.status_code == 201, pc.text
        drafted[book] = (pc.json()["id"], owner.get(f"/corpora/{source}").json()["files"][0]["file"]["id"])
    pretranslate = [{"parallelCorpusId": pc_id} for pc_id, _ in drafted.values()]
    build = owner.post(f"{base}/builds", json={"trainOn": [], "pretranslate": pretranslate})
    assert build.status_code == 201, build.text
    assert wait_for_build(owner, build.json())["state"] == "Completed"

    def drafts(book: str) -> list[str]:
        answer = owner.get(f"{base}/parallel-corpora/{drafted[book][0]}/pretranslations")
        assert answer.status_code == 200, answer.text
        return [row["translation"] for row in answer.json()]

    assert drafts("MAT") == MAT and drafts("MRK") == MRK
    assert owner.delete(f"/files/{drafted['MAT'][1]}").status_code == 200
    assert drafts("MAT") == []
    assert drafts("MRK") == MRK
