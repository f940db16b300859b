"""Data files and corpora as Serval's generated client calls them: `POST files/{id}/contents`
downloads, `PATCH corpora/{id}` sends a bare array of files, and any file name survives the
download's `Content-Disposition`."""

from __future__ import annotations

import re
import unicodedata
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from serval_api.auth import ALL_SCOPES
from tests.api.conftest import RunningApi

NAMES = {
    "devanagari": "उत्पत्ति १.txt",
    "cyrillic": "Бытие глава 1.txt",
    "arabic": "سفر التكوين.txt",
    "ethiopic": "ኦሪት ዘፍጥረት.usfm",
    "cjk": "创世记 第一章.txt",
    "combining": "Ge\u0301ne\u0300se\u0302 a\u0323\u0301.txt",
    "rtl-marks": "\u202bבראשית\u202c \u200fא.txt",
    "emoji": "📖 Bible 🙏🏽 👨‍👩‍👧.txt",
    "latin-1": "Génesis «1».txt",
    "quotes-and-separators": 'a "b"; c=d e, %41 (1).txt',
    "ascii": "Genesis 1.txt",
}
DISPOSITION = re.compile(
    r"""^attachment; filename="(?P<fallback>[ !#-\[\]-~]*)"; filename\*=UTF-8''(?P<encoded>[A-Za-z0-9!#$&+\-.^_`|~%]+)$"""
)


@pytest.fixture
def owner(api: RunningApi) -> Any:
    with api.client(scopes=ALL_SCOPES) as client:
        yield client


def upload(client: httpx.Client, name: str, data: bytes) -> dict[str, Any]:
    answer = client.post(
        "/files", files={"file": ("upload.txt", data)}, data={"format": "Text", "name": name}
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    assert body["name"] == name
    return body


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_post_contents_downloads_and_any_name_decodes_back(owner: httpx.Client, name: str) -> None:
    data = f"{name}\nIn the beginning\n".encode()
    file = upload(owner, name, data)
    answers = [owner.post(f"/files/{file['id']}/contents"), owner.get(f"/files/{file['id']}/contents")]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.content == data
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        raw = answer.headers.raw
        (header,) = [v for k, v in raw if k.lower() == b"content-disposition"]
        text = header.decode("ascii")
        match = DISPOSITION.match(text)
        assert match, text
        assert unquote(match["encoded"], encoding="utf-8", errors="strict") == name
        fallback = match["fallback"]
        assert fallback and fallback.isascii()
        if name.isascii() and '"' not in name and "\\" not in name:
            assert fallback == name
        assert fallback.rpartition(".")[2] == name.rpartition(".")[2]


def test_an_accented_name_keeps_its_letters_in_the_fallback(owner: httpx.Client) -> None:
    file = upload(owner, NAMES["latin-1"], b"x\n")
    header = owner.post(f"/files/{file['id']}/contents").headers["content-disposition"]
    assert 'filename="Genesis _1_.txt"' in header
    assert unicodedata.is_normalized("NFC", NAMES["latin-1"])


def test_post_contents_is_owned_and_scoped(api: RunningApi, owner: httpx.Client) -> None:
    file = upload(owner, "a.txt", b"a\n")
    with api.client("owner-b", scopes=ALL_SCOPES) as other:
        assert other.post(f"/files/{file['id']}/contents").status_code == 403
    assert owner.post("/files/nope/contents").status_code == 404
    with api.client(scopes=tuple(s for s in ALL_SCOPES if s != "read:files")) as unscoped:
        assert unscoped.post(f"/files/{file['id']}/contents").status_code == 403


def test_patch_corpus_with_a_bare_array_replaces_its_files(owner: httpx.Client) -> None:
    first, second, third = (upload(owner, f"{book}.txt", b"x\n") for book in ("MAT", "MRK", "LUK"))
    created = owner.post(
        "/corpora", json={"language": "en", "name": "nt", "files": [{"fileId": first["id"]}]}
    )
    assert created.status_code == 201, created.text
    corpus = created.json()
    url = f"/corpora/{corpus['id']}"

    patched = owner.patch(url, json=[{"fileId": second["id"], "textId": "MRK"}, {"fileId": third["id"]}])
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert [(f["file"]["id"], f.get("textId")) for f in body["files"]] == [
        (second["id"], "MRK"),
        (third["id"], "LUK"),
    ]
    assert all(f["file"]["url"].endswith(f"/files/{f['file']['id']}") for f in body["files"])
    assert (body["id"], body["language"], body["name"], body["url"]) == (
        corpus["id"],
        "en",
        "nt",
        corpus["url"],
    )
    assert body["revision"] > corpus["revision"]
    assert owner.get(url).json()["files"] == body["files"]

    emptied = owner.patch(url, json=[])
    assert emptied.status_code == 200 and emptied.json()["files"] == []

    as_object = owner.patch(
        url, json={"name": "gospels", "files": [{"fileId": first["id"], "textId": "MAT"}]}
    )
    assert as_object.status_code == 200, as_object.text
    assert as_object.json()["name"] == "gospels"
    assert [f["file"]["id"] for f in as_object.json()["files"]] == [first["id"]]

    assert owner.patch(url, json=[{"fileId": "nope"}]).status_code in (400, 404)
    for bad in ([{"textId": "MAT"}], 7, "files"):
        answer = owner.patch(url, json=bad)
        assert answer.status_code == 400, (bad, answer.text)
    assert [f["file"]["id"] for f in owner.get(url).json()["files"]] == [first["id"]]
