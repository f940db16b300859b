from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_api.auth import (
    ALL_SCOPES,
    CREATE_CORPORA,
    CREATE_FILES,
    DELETE_CORPORA,
    DELETE_FILES,
    READ_CORPORA,
    READ_ENGINES,
    READ_FILES,
    UPDATE_CORPORA,
    UPDATE_ENGINES,
    UPDATE_FILES,
)
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi, create_engine

# (method, path template, scope): the access-matrix test fills in {file_id}, {corpus_id},
# {engine_id} and {pc_id} with entities of the right owner. `/corpora` answers to Serval's files
# scopes and to this service's older `*:corpora` scopes: (Serval's, ours), either grants.
FILE_AND_CORPUS_ENDPOINTS: list[tuple[str, str, str | tuple[str, str]]] = [
    ("GET", "/files", READ_FILES),
    ("POST", "/files", CREATE_FILES),
    ("GET", "/files/{file_id}", READ_FILES),
    ("GET", "/files/{file_id}/contents", READ_FILES),
    ("POST", "/files/{file_id}/contents", READ_FILES),
    ("PATCH", "/files/{file_id}", UPDATE_FILES),
    ("DELETE", "/files/{file_id}", DELETE_FILES),
    ("GET", "/corpora", (READ_FILES, READ_CORPORA)),
    ("POST", "/corpora", (CREATE_FILES, CREATE_CORPORA)),
    ("GET", "/corpora/{corpus_id}", (READ_FILES, READ_CORPORA)),
    ("PATCH", "/corpora/{corpus_id}", (UPDATE_FILES, UPDATE_CORPORA)),
    ("DELETE", "/corpora/{corpus_id}", (DELETE_FILES, DELETE_CORPORA)),
    ("GET", "/translation/engines/{engine_id}/parallel-corpora", READ_ENGINES),
    ("POST", "/translation/engines/{engine_id}/parallel-corpora", UPDATE_ENGINES),
    ("GET", "/translation/engines/{engine_id}/parallel-corpora/{pc_id}", READ_ENGINES),
    ("PATCH", "/translation/engines/{engine_id}/parallel-corpora/{pc_id}", UPDATE_ENGINES),
    ("DELETE", "/translation/engines/{engine_id}/parallel-corpora/{pc_id}", UPDATE_ENGINES),
]

MAX_UPLOAD_BYTES = 4096


@pytest.fixture
def small_api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, max_upload_bytes=MAX_UPLOAD_BYTES),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def owner(small_api: RunningApi) -> Iterator[httpx.Client]:
    with small_api.client(scopes=ALL_SCOPES) as c:
        yield c


def upload(
    client: httpx.Client, data: bytes, fmt: str = "Text", name: str | None = "MAT.txt", path: str = "/files"
) -> httpx.Response:
    fields = {"format": fmt} | ({"name": name} if name else {})
    if path != "/files":
        return client.patch(path, files={"file": ("upload.bin", data)})
    return client.post(path, data=fields, files={"file": ("upload.bin", data)})


def new_file(client: httpx.Client, data: bytes = b"one\ntwo\n", **kw: Any) -> dict[str, Any]:
    response = upload(client, data, **kw)
    assert response.status_code == 201, response.text
    file: dict[str, Any] = response.json()
    return file


def new_corpus(client: httpx.Client, files: list[dict[str, Any]], language: str = "en") -> dict[str, Any]:
    response = client.post("/corpora", json={"language": language, "files": files})
    assert response.status_code == 201, response.text
    corpus: dict[str, Any] = response.json()
    return corpus


def test_file_upload_read_contents_replace_delete(small_api: RunningApi, owner: httpx.Client) -> None:
    response = upload(owner, b"Mwanzo wa habari njema\n")
    assert response.status_code == 201
    file = response.json()
    assert file == {"id": file["id"], "url": file["url"], "name": "MAT.txt", "format": "Text", "revision": 1}
    assert file["url"] == f"{small_api.rest_url}/api/v1/files/{file['id']}"
    assert response.headers["location"] == file["url"]
    assert owner.get(f"/files/{file['id']}").json() == file
    assert [f["id"] for f in owner.get("/files").json()] == [file["id"]]

    contents = owner.get(f"/files/{file['id']}/contents")
    assert contents.status_code == 200
    assert contents.content == b"Mwanzo wa habari njema\n"
    assert contents.headers["content-type"] == "text/plain; charset=utf-8"

    replaced = upload(owner, b"replaced\n", path=f"/files/{file['id']}")
    assert replaced.status_code == 200
    assert replaced.json()["revision"] == 2
    assert owner.get(f"/files/{file['id']}/contents").content == b"replaced\n"

    assert owner.delete(f"/files/{file['id']}").status_code == 200
    assert owner.get(f"/files/{file['id']}").status_code == 404
    assert owner.get(f"/files/{file['id']}/contents").status_code == 404
    assert owner.delete(f"/files/{file['id']}").status_code == 404


def test_upload_name_defaults_to_the_uploaded_file_name(owner: httpx.Client) -> None:
    assert new_file(owner, name=None)["name"] == "upload.bin"


def test_bad_uploads_are_400(owner: httpx.Client) -> None:
    bad_format = upload(owner, b"x", fmt="Usx")
    assert bad_format.status_code == 400 and "format" in bad_format.json()["message"]
    latin1 = upload(owner, "caf\xe9".encode("latin-1"))
    assert latin1.status_code == 400 and "UTF-8" in latin1.json()["message"]
    not_zip = upload(owner, b"plain text", fmt="Paratext")
    assert not_zip.status_code == 400 and "zip" in not_zip.json()["message"]
    assert owner.post("/files", data={"format": "Text"}).status_code == 400
    assert owner.post("/files", json={"format": "Text"}).status_code == 400
    assert owner.get("/files").json() == []


def test_oversized_upload_is_400_as_in_serval(owner: httpx.Client) -> None:
    """Serval's `DataFilesTests.CreateAsync` expects 400 for a file over its `RequestSizeLimit`, and
    Serval answers 400 behind Kestrel too: its controller reads the form in model binding, which
    turns Kestrel's refusal of the body into a 400 (dotnet/aspnetcore#47525), not the 413 Kestrel
    answers elsewhere. Over the declared length (refused before reading) and streamed alike."""
    assert upload(owner, b"a" * MAX_UPLOAD_BYTES).status_code == 201
    response = upload(owner, b"a" * (MAX_UPLOAD_BYTES + 1))
    assert response.status_code == 400
    assert f"limit of {MAX_UPLOAD_BYTES} bytes" in response.json()["message"]
    huge = upload(owner, b"a" * (MAX_UPLOAD_BYTES + 200_000))
    assert huge.status_code == 400
    assert len(owner.get("/files").json()) == 1


def test_the_default_upload_limit_is_servals() -> None:
    """Serval's `[RequestSizeLimit(100_000_000)]` on `POST` and `PATCH /files`."""
    assert ApiSettings().max_upload_bytes == 100_000_000


def test_corpus_crud_and_text_id_default(small_api: RunningApi, owner: httpx.Client) -> None:
    mat = new_file(owner, name="MAT.txt")
    unnamed = new_file(owner, name=None)
    response = owner.post(
        "/corpora",
        json={
            "name": "en",
            "language": "en",
            "files": [{"fileId": mat["id"]}, {"fileId": unnamed["id"], "textId": "X"}],
        },
    )
    assert response.status_code == 201
    corpus = response.json()
    assert (
        response.headers["location"] == corpus["url"] == f"{small_api.rest_url}/api/v1/corpora/{corpus['id']}"
    )
    assert corpus["revision"] == 1 and corpus["language"] == "en" and corpus["name"] == "en"
    assert corpus["files"] == [
        {"file": {"id": mat["id"], "url": mat["url"]}, "textId": "MAT"},
        {"file": {"id": unnamed["id"], "url": unnamed["url"]}, "textId": "X"},
    ]
    assert owner.get(f"/corpora/{corpus['id']}").json() == corpus
    assert [c["id"] for c in owner.get("/corpora").json()] == [corpus["id"]]

    patched = owner.patch(
        f"/corpora/{corpus['id']}", json={"language": "sw", "files": [{"fileId": mat["id"]}]}
    )
    assert patched.status_code == 200
    assert patched.json()["revision"] == 2 and patched.json()["language"] == "sw"
    assert len(patched.json()["files"]) == 1

    # As in Serval, deleting a file a corpus names removes it from the corpus.
    assert owner.delete(f"/files/{mat['id']}").status_code == 200
    assert owner.get(f"/files/{mat['id']}").status_code == 404
    emptied = owner.get(f"/corpora/{corpus['id']}").json()
    assert emptied["files"] == [] and emptied["revision"] == 3
    assert owner.delete(f"/corpora/{corpus['id']}").status_code == 200
    assert owner.get(f"/corpora/{corpus['id']}").status_code == 404


def test_corpus_validation(small_api: RunningApi, owner: httpx.Client) -> None:
    bad_language = owner.post("/corpora", json={"language": "not a language!", "files": []})
    assert bad_language.status_code == 400 and bad_language.json()["message"].startswith("language:")
    assert owner.post("/corpora", json={"files": []}).status_code == 400
    unknown = owner.post("/corpora", json={"language": "en", "files": [{"fileId": "nope"}]})
    assert unknown.status_code == 400 and "files[0].fileId" in unknown.json()["message"]
    with small_api.client("owner-b", scopes=ALL_SCOPES) as other:
        foreign = new_file(other)
    response = owner.post("/corpora", json={"language": "en", "files": [{"fileId": foreign["id"]}]})
    assert response.status_code == 400
    assert response.json()["message"] == unknown.json()["message"].replace("nope", foreign["id"])


def test_parallel_corpus_crud(small_api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    src = new_corpus(owner, [{"fileId": new_file(owner)["id"]}], "en")
    trg = new_corpus(owner, [{"fileId": new_file(owner)["id"]}], "sw")
    base = f"/translation/engines/{engine['id']}/parallel-corpora"
    response = owner.post(
        base, json={"name": "nt", "sourceCorpusIds": [src["id"]], "targetCorpusIds": [trg["id"]]}
    )
    assert response.status_code == 201
    pc = response.json()
    assert pc == {
        "id": pc["id"],
        "url": f"{engine['url']}/parallel-corpora/{pc['id']}",
        "name": "nt",
        "engine": {"id": engine["id"], "url": engine["url"]},
        "sourceCorpora": [{"id": src["id"], "url": src["url"]}],
        "targetCorpora": [{"id": trg["id"], "url": trg["url"]}],
    }
    assert response.headers["location"] == pc["url"]
    assert owner.get(f"{base}/{pc['id']}").json() == pc
    assert owner.get(base).json() == [pc]

    patched = owner.patch(f"{base}/{pc['id']}", json={"sourceCorpusIds": [src["id"], trg["id"]]})
    assert patched.status_code == 200 and len(patched.json()["sourceCorpora"]) == 2
    no_target = owner.patch(f"{base}/{pc['id']}", json={"targetCorpusIds": []})
    assert no_target.status_code == 200 and no_target.json()["targetCorpora"] == [], "as in Serval"
    no_source = owner.patch(f"{base}/{pc['id']}", json={"sourceCorpusIds": []})
    assert no_source.status_code == 200 and no_source.json()["sourceCorpora"] == [], "as in Serval"
    assert owner.patch(f"{base}/{pc['id']}", json={"sourceCorpusIds": [src["id"]]}).status_code == 200

    assert owner.delete(f"/corpora/{src['id']}").status_code == 409
    assert owner.delete(f"{base}/{pc['id']}").status_code == 200
    assert owner.get(f"{base}/{pc['id']}").status_code == 404
    assert owner.delete(f"/corpora/{src['id']}").status_code == 200


def test_parallel_corpus_validation(owner: httpx.Client) -> None:
    """As Serval's `AddParallelCorpus`: a corpus must exist and have files; either list may be empty."""
    engine = create_engine(owner)
    corpus = new_corpus(owner, [{"fileId": new_file(owner)["id"]}])
    base = f"/translation/engines/{engine['id']}/parallel-corpora"
    no_files = new_corpus(owner, [])
    empty = owner.post(base, json={"sourceCorpusIds": [no_files["id"]], "targetCorpusIds": [corpus["id"]]})
    assert empty.status_code == 400, empty.text
    assert empty.json()["message"] == (
        f"sourceCorpusIds[0]: the corpus {no_files['id']} does not have any files associated with it; "
        "add files to it first"
    )
    no_source = owner.post(base, json={"sourceCorpusIds": [], "targetCorpusIds": [corpus["id"]]})
    assert no_source.status_code == 201, no_source.text
    unknown = owner.post(base, json={"sourceCorpusIds": [corpus["id"]], "targetCorpusIds": ["nope"]})
    assert unknown.status_code == 400 and "targetCorpusIds[0]" in unknown.json()["message"]
    missing_engine = owner.post(
        "/translation/engines/nope/parallel-corpora",
        json={"sourceCorpusIds": [corpus["id"]], "targetCorpusIds": [corpus["id"]]},
    )
    assert missing_engine.status_code == 404


def test_engine_delete_removes_its_parallel_corpora(owner: httpx.Client) -> None:
    engine = create_engine(owner)
    corpus = new_corpus(owner, [{"fileId": new_file(owner)["id"]}])
    base = f"/translation/engines/{engine['id']}/parallel-corpora"
    created = owner.post(base, json={"sourceCorpusIds": [corpus["id"]], "targetCorpusIds": [corpus["id"]]})
    assert created.status_code == 201, created.text
    assert owner.delete(f"/corpora/{corpus['id']}").status_code == 409
    assert owner.delete(f"/translation/engines/{engine['id']}").status_code == 200
    assert owner.delete(f"/corpora/{corpus['id']}").status_code == 200


def _entities(client: httpx.Client) -> dict[str, str]:
    file = new_file(client)
    corpus = new_corpus(client, [{"fileId": file["id"]}])
    engine = create_engine(client)
    pc = client.post(
        f"/translation/engines/{engine['id']}/parallel-corpora",
        json={"sourceCorpusIds": [corpus["id"]], "targetCorpusIds": [corpus["id"]]},
    ).json()
    unused_file = new_file(client)
    # With a file: a parallel corpus may name only corpora that have files (Serval's rule).
    unused_corpus = new_corpus(client, [{"fileId": unused_file["id"]}])
    return {
        "file_id": unused_file["id"],
        "corpus_id": unused_corpus["id"],
        "engine_id": engine["id"],
        "pc_id": pc["id"],
    }


def _call(client: httpx.Client, method: str, path: str, ids: dict[str, str]) -> httpx.Response:
    url = path.format(**ids)
    if (method == "POST" and path == "/files") or (method == "PATCH" and path.startswith("/files/")):
        data = {"format": "Text"} if method == "POST" else None
        return client.request(method, url, data=data, files={"file": ("a.txt", b"a\n")})
    body: dict[str, Any] | None = None
    if path.endswith("/corpora") or path.endswith("{corpus_id}"):
        body = {"language": "en", "files": []}
    if "parallel-corpora" in path and method in ("POST", "PATCH"):
        body = {"sourceCorpusIds": [ids["corpus_id"]], "targetCorpusIds": [ids["corpus_id"]]}
    return client.request(method, url, json=body) if body is not None else client.request(method, url)


@pytest.mark.parametrize(("method", "path", "scope"), FILE_AND_CORPUS_ENDPOINTS)
def test_access(
    small_api: RunningApi, owner: httpx.Client, method: str, path: str, scope: str | tuple[str, str]
) -> None:
    """Serval's `DataFilesTests` and `CorporaTests`: no credentials 401, no scope 403, another
    owner's file or corpus (or engine) 403, a missing one 404, the owner's scope 200/201."""
    scopes = scope if isinstance(scope, tuple) else (scope,)
    ids = _entities(owner)
    with httpx.Client(base_url=f"{small_api.rest_url}/api/v1", timeout=60) as anonymous:
        assert _call(anonymous, method, path, ids).status_code == 401
    with small_api.client(scopes=tuple(s for s in ALL_SCOPES if s not in scopes)) as unscoped:
        assert _call(unscoped, method, path, ids).status_code == 403
    if "{" in path:
        with small_api.client("owner-b", scopes=ALL_SCOPES) as other:
            assert _call(other, method, path, ids).status_code == 403
        missing = {name: "0" * 24 for name in ids}
        with small_api.client("owner-a", scopes=scopes) as scoped:
            assert _call(scoped, method, path, missing).status_code == 404
    for granting in scopes:
        with small_api.client("owner-a", scopes=(granting,)) as scoped:
            assert _call(scoped, method, path, _entities(owner)).status_code in (200, 201), granting
