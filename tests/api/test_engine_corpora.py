"""Engine corpora (Serval's `TranslationCorpus`) and builds that train on and pretranslate them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serval_api.auth import ALL_SCOPES, DELETE_FILES
from serval_api.service.file_contents import contents_key
from tests.api.conftest import RunningApi, create_engine
from tests.api.file_rows import chunk_count
from tests.api.test_build_export import (
    ENG_MAT,
    ENG_MRK,
    SWH_MAT,
    SWH_MRK,
    bible_engine,
    paratext_zip,
    start,
    store,
    text,
    train_files,
    upload,
)


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def corpora_path(engine_id: str) -> str:
    return f"/translation/engines/{engine_id}/corpora"


def engine_corpus(
    client: httpx.Client,
    engine_id: str,
    source: dict[str, bytes],
    target: dict[str, bytes],
    fmt: str = "Text",
) -> dict[str, Any]:
    body = {
        "sourceLanguage": "en",
        "targetLanguage": "sw",
        "sourceFiles": [{"fileId": upload(client, name, data, fmt)} for name, data in source.items()],
        "targetFiles": [{"fileId": upload(client, name, data, fmt)} for name, data in target.items()],
    }
    response = client.post(corpora_path(engine_id), json=body)
    assert response.status_code == 201, response.text
    corpus: dict[str, Any] = response.json()
    return corpus


def bible_corpus(client: httpx.Client, engine_id: str) -> dict[str, Any]:
    """MAT 1:1–3 and MRK 1:1–2; the Swahili MRK file's first line is blank."""
    return engine_corpus(
        client,
        engine_id,
        {"MAT.txt": text(ENG_MAT), "MRK.txt": text(ENG_MRK)},
        {"MRK.txt": text(["", SWH_MRK[1]]), "MAT.txt": text(SWH_MAT)},
    )


def test_create_list_get_update_delete(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    source_file = upload(owner, "MAT.txt", text(ENG_MAT))
    target_file = upload(owner, "swahili.txt", text(SWH_MAT))
    body = {
        "name": "Matthew",
        "sourceLanguage": "en",
        "targetLanguage": "sw",
        "sourceFiles": [{"fileId": source_file}],
        "targetFiles": [{"fileId": target_file, "textId": "MAT"}],
    }
    response = owner.post(corpora_path(engine["id"]), json=body)
    assert response.status_code == 201, response.text
    corpus = response.json()
    assert api.service.services is not None
    files_url = api.service.services.settings.api_base_url + "/api/v1/files"
    assert corpus == {
        "id": corpus["id"],
        "url": f"{engine['url']}/corpora/{corpus['id']}",
        "engine": {"id": engine["id"], "url": engine["url"]},
        "name": "Matthew",
        "sourceLanguage": "en",
        "targetLanguage": "sw",
        "sourceFiles": [{"file": {"id": source_file, "url": f"{files_url}/{source_file}"}, "textId": "MAT"}],
        "targetFiles": [{"file": {"id": target_file, "url": f"{files_url}/{target_file}"}, "textId": "MAT"}],
    }
    assert response.headers["location"] == corpus["url"]
    url = f"{corpora_path(engine['id'])}/{corpus['id']}"
    assert owner.get(corpora_path(engine["id"])).json() == [corpus]
    assert owner.get(url).json() == corpus

    other_target = upload(owner, "MAT.txt", text(SWH_MAT))
    updated = owner.patch(url, json={"targetFiles": [{"fileId": other_target}]})
    assert updated.status_code == 200, updated.text
    assert updated.json()["sourceFiles"] == corpus["sourceFiles"]
    assert [f["file"]["id"] for f in updated.json()["targetFiles"]] == [other_target]
    assert owner.get(url).json() == updated.json()

    assert owner.delete(url).status_code == 200
    assert owner.get(url).status_code == 404
    assert owner.get(corpora_path(engine["id"])).json() == []
    assert owner.get(f"/files/{source_file}").status_code == 200, "without delete-files the files stay"


def test_other_owners_and_other_engines_see_nothing(api: RunningApi, owner: httpx.Client) -> None:
    """Another owner's engine answers 403 (Serval's `CheckOwnerAsync`) on everything under it;
    a corpus of another engine of the owner is 404."""
    engine = create_engine(owner)
    corpus = bible_corpus(owner, engine["id"])
    url = f"{corpora_path(engine['id'])}/{corpus['id']}"
    other_engine = create_engine(owner)
    assert owner.get(f"{corpora_path(other_engine['id'])}/{corpus['id']}").status_code == 404
    with api.client("owner-b", scopes=ALL_SCOPES) as stranger:
        assert stranger.get(url).status_code == 403
        assert stranger.get(corpora_path(engine["id"])).status_code == 403
        assert stranger.patch(url, json={"sourceFiles": []}).status_code == 403
        assert stranger.delete(url, params={"delete-files": "true"}).status_code == 403
        their_file = upload(stranger, "MAT.txt", text(ENG_MAT))
        their_engine = create_engine(stranger)
        body = {"sourceLanguage": "en", "targetLanguage": "sw", "sourceFiles": [], "targetFiles": []}
        assert stranger.post(corpora_path(engine["id"]), json=body).status_code == 403
        # Another owner's file is refused like an unknown one: 400, not 404.
        mine = owner.post(corpora_path(engine["id"]), json={**body, "sourceFiles": [{"fileId": their_file}]})
        assert mine.status_code == 400 and "sourceFiles[0].fileId" in mine.json()["message"]
        assert stranger.get(corpora_path(their_engine["id"])).json() == []
    assert owner.get(url).json() == corpus


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"sourceLanguage": "not a language!"}, "sourceLanguage"),
        ({"targetLanguage": "x" * 100}, "targetLanguage"),
        ({"targetFiles": [{"fileId": "nope"}]}, "targetFiles[0].fileId"),
        ({"sourceFiles": None}, "sourceFiles"),
        ({"name": "n" * 201}, "name"),
    ],
)
def test_invalid_configs_are_400(owner: httpx.Client, change: dict[str, Any], expected: str) -> None:
    engine = create_engine(owner)
    body = {"sourceLanguage": "en", "targetLanguage": "sw", "sourceFiles": [], "targetFiles": [], **change}
    response = owner.post(corpora_path(engine["id"]), json=body)
    assert response.status_code == 400, response.text
    assert expected in response.json()["message"]
    assert owner.get(corpora_path(engine["id"])).json() == []


def test_delete_files_removes_the_files_and_their_store_objects(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    corpus = bible_corpus(owner, engine["id"])
    file_ids = [f["file"]["id"] for f in (*corpus["sourceFiles"], *corpus["targetFiles"])]
    shared = file_ids[0]
    made = owner.post("/corpora", json={"language": "en", "files": [{"fileId": shared}]})
    assert made.status_code == 201
    monolingual = made.json()
    url = f"{corpora_path(engine['id'])}/{corpus['id']}"

    with api.client(scopes=tuple(s for s in ALL_SCOPES if s != DELETE_FILES)) as no_file_deletes:
        assert no_file_deletes.delete(url, params={"delete-files": "true"}).status_code == 403
    assert owner.get(url).status_code == 200

    assert owner.delete(url, params={"delete-files": "true"}).status_code == 200
    assert owner.get(url).status_code == 404
    # As Serval's DeleteCorpus: every file it named, also one a monolingual corpus names.
    for file_id in file_ids:
        assert owner.get(f"/files/{file_id}").status_code == 404
        assert chunk_count(api, file_id) == 0
        assert not store(api).exists(contents_key(file_id))
    assert owner.get(f"/corpora/{monolingual['id']}").json()["files"] == []


EXPECTED_SRC = [*ENG_MAT, ENG_MRK[1]]
EXPECTED_TRG = [*SWH_MAT, SWH_MRK[1]]


def test_build_trains_on_and_pretranslates_an_engine_corpus(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    corpus = bible_corpus(owner, engine["id"])
    body = {"trainOn": [{"corpusId": corpus["id"]}], "pretranslate": [{"corpusId": corpus["id"]}]}
    response = start(owner, engine["id"], body)
    assert response.status_code == 201, response.text
    build = response.json()
    assert train_files(api, build["id"]) == (EXPECTED_SRC, EXPECTED_TRG)
    rows = json.loads(store(api).read_bytes(f"builds/{build['id']}/pretranslate.src.json"))
    assert rows == [
        {
            "corpusId": corpus["id"],
            "textId": "MRK",
            "sourceRefs": ["MRK:1"],
            "targetRefs": ["MRK:1"],
            "translation": ENG_MRK[0],
        }
    ]
    assert build["executionData"]["trainCount"] == 4
    assert build["executionData"]["pretranslateCount"] == 1
    assert build["executionData"]["warnings"] == []
    assert api.launcher.specs[-1].train is True
    link = {"id": corpus["id"], "url": corpus["url"]}
    assert build["trainOn"] == [{"corpus": link}]
    assert build["pretranslate"] == [{"corpus": link}]


def test_text_ids_and_scripture_range_choose_an_engine_corpus_texts(
    api: RunningApi, owner: httpx.Client
) -> None:
    engine = create_engine(owner)
    corpus = bible_corpus(owner, engine["id"])
    build = start(
        owner,
        engine["id"],
        {"trainOn": [{"corpusId": corpus["id"], "textIds": ["MAT"]}], "pretranslate": []},
    ).json()
    assert train_files(api, build["id"]) == (ENG_MAT, SWH_MAT)
    assert not store(api).exists(f"builds/{build['id']}/pretranslate.src.json")
    assert build["trainOn"] == [{"corpus": {"id": corpus["id"], "url": corpus["url"]}, "textIds": ["MAT"]}]
    assert build["pretranslate"] == []


def test_paratext_engine_corpus_with_a_scripture_range(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    corpus = engine_corpus(
        owner,
        engine["id"],
        {"en.zip": paratext_zip(ENG_MAT)},
        {"sw.zip": paratext_zip([SWH_MAT[0]])},
        fmt="Paratext",
    )
    body = {
        "trainOn": [{"corpusId": corpus["id"], "scriptureRange": "MAT1"}],
        "pretranslate": [{"corpusId": corpus["id"], "scriptureRange": "MAT"}],
    }
    build = start(owner, engine["id"], body).json()
    assert train_files(api, build["id"]) == ([ENG_MAT[0]], [SWH_MAT[0]])
    rows = json.loads(store(api).read_bytes(f"builds/{build['id']}/pretranslate.src.json"))
    assert [(r["corpusId"], r["sourceRefs"], r["translation"]) for r in rows] == [
        (corpus["id"], ["MAT 1:2"], ENG_MAT[1]),
        (corpus["id"], ["MAT 1:3"], ENG_MAT[2]),
    ]
    assert build["executionData"]["pretranslateCount"] == 2


def test_omitted_train_on_uses_parallel_corpora_and_engine_corpora(
    api: RunningApi, owner: httpx.Client
) -> None:
    engine, _ = bible_engine(owner)
    engine_corpus(owner, engine["id"], {"LUK.txt": text(["luke one"])}, {"LUK.txt": text(["luka moja"])})
    build = start(owner, engine["id"], {}).json()
    assert train_files(api, build["id"]) == ([*EXPECTED_SRC, "luke one"], [*EXPECTED_TRG, "luka moja"])
    assert build["executionData"]["trainCount"] == 5
    assert "trainOn" not in build


def test_corpus_id_naming_a_parallel_corpus_keeps_its_meaning(api: RunningApi, owner: httpx.Client) -> None:
    engine, pc_id = bible_engine(owner)
    build = start(
        owner, engine["id"], {"trainOn": [{"corpusId": pc_id}], "pretranslate": [{"corpusId": pc_id}]}
    ).json()
    assert train_files(api, build["id"]) == (EXPECTED_SRC, EXPECTED_TRG)
    rows = json.loads(store(api).read_bytes(f"builds/{build['id']}/pretranslate.src.json"))
    assert [r["corpusId"] for r in rows] == [pc_id]
    link = {"id": pc_id, "url": f"{engine['url']}/parallel-corpora/{pc_id}"}
    assert build["trainOn"] == [{"parallelCorpus": link}]
    assert build["pretranslate"] == [{"parallelCorpus": link}]


def test_build_dto_carries_every_link_and_filter(api: RunningApi, owner: httpx.Client) -> None:
    engine, pc_id = bible_engine(owner)
    pc = owner.get(f"/translation/engines/{engine['id']}/parallel-corpora/{pc_id}").json()
    source, target = pc["sourceCorpora"][0], pc["targetCorpora"][0]
    corpus = bible_corpus(owner, engine["id"])
    body = {
        "trainOn": [
            {
                "parallelCorpusId": pc_id,
                "sourceFilters": [{"corpusId": source["id"], "textIds": ["MAT"]}],
                "targetFilters": [{"corpusId": target["id"], "scriptureRange": "MAT"}],
            },
            {"corpusId": corpus["id"], "scriptureRange": "MRK"},
        ],
        "pretranslate": [{"parallelCorpusId": pc_id, "sourceFilters": [{"corpusId": source["id"]}]}],
    }
    response = start(owner, engine["id"], body)
    assert response.status_code == 201, response.text
    build = response.json()
    pc_link = {"id": pc_id, "url": pc["url"]}
    assert build["trainOn"] == [
        {
            "parallelCorpus": pc_link,
            "sourceFilters": [{"corpus": source, "textIds": ["MAT"]}],
            "targetFilters": [{"corpus": target, "scriptureRange": "MAT"}],
        },
        {"corpus": {"id": corpus["id"], "url": corpus["url"]}, "scriptureRange": "MRK"},
    ]
    assert build["pretranslate"] == [{"parallelCorpus": pc_link, "sourceFilters": [{"corpus": source}]}]
    assert source["url"].endswith(f"/api/v1/corpora/{source['id']}")
    assert owner.get(f"/translation/engines/{engine['id']}/builds/{build['id']}").json() == build
    assert train_files(api, build["id"]) == ([*ENG_MAT, ENG_MRK[1]], [*SWH_MAT, SWH_MRK[1]])


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"corpusId": "nope"}, "trainOn[0]: unknown corpus nope"),
        ({}, "trainOn[0]: name either a corpusId or a parallelCorpusId"),
        ({"corpusId": "{ec}", "parallelCorpusId": "{pc}"}, "name either"),
        ({"corpusId": "{ec}", "scriptureRange": "MAT:1"}, "trainOn[0].scriptureRange"),
        ({"parallelCorpusId": "{pc}", "targetFilters": [{"corpusId": "x"}]}, "trainOn[0].targetFilters[0]"),
    ],
)
def test_bad_entries_are_400(
    api: RunningApi, owner: httpx.Client, entry: dict[str, Any], expected: str
) -> None:
    engine, pc_id = bible_engine(owner)
    ec_id = bible_corpus(owner, engine["id"])["id"]
    filled = json.loads(json.dumps(entry).replace("{ec}", ec_id).replace("{pc}", pc_id))
    response = start(owner, engine["id"], {"trainOn": [filled]})
    assert response.status_code == 400, response.text
    assert expected in response.json()["message"]
    assert owner.get(f"/translation/engines/{engine['id']}/builds").json() == []
    assert api.launcher.specs == []


def test_deleting_the_engine_deletes_its_corpora(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    corpus = bible_corpus(owner, engine["id"])
    assert owner.delete(f"/translation/engines/{engine['id']}").status_code == 200
    file_id = corpus["sourceFiles"][0]["file"]["id"]
    assert owner.delete(f"/files/{file_id}").status_code == 200, "no engine corpus names it any more"
