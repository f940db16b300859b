"""The cap on data-file bytes per owner (`limits.data_file_bytes_per_owner`, docs/limits.md) on a
real API service over REST: an upload or a replacement that would take an owner's files past it
answers 400 and writes nothing; the cap is per owner; deleting files frees room; 0 = no cap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serval_api.auth import ALL_SCOPES
from serval_common.settings import ApiSettings, LimitSettings, Settings
from tests.api.conftest import RunningApi

CAP = 1000
QUOTA_MESSAGE = "bytes allowed per owner"


def start_api(tmp_path: Path, database_url: str, cap: int) -> RunningApi:
    return RunningApi(
        Settings(
            home=tmp_path,
            database_url=database_url,
            api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
            limits=LimitSettings(data_file_bytes_per_owner=cap),
        )
    )


@pytest.fixture
def capped(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    running = start_api(tmp_path, database_url, CAP)
    try:
        yield running
    finally:
        running.close()


def upload(client: httpx.Client, data: bytes, name: str = "MAT.txt") -> httpx.Response:
    return client.post("/files", data={"format": "Text", "name": name}, files={"file": ("upload.bin", data)})


def replace(client: httpx.Client, file_id: str, data: bytes) -> httpx.Response:
    return client.patch(f"/files/{file_id}", files={"file": ("upload.bin", data)})


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    file: dict[str, Any] = response.json()
    return file


def assert_over_quota(response: httpx.Response, used: int) -> None:
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert f"your files already take {used} of the {CAP} {QUOTA_MESSAGE}" in message
    assert "limits.data_file_bytes_per_owner" in message


def file_ids(client: httpx.Client) -> list[str]:
    answer = client.get("/files")
    assert answer.status_code == 200, answer.text
    return [f["id"] for f in answer.json()]


def test_an_upload_over_the_owners_cap_is_400_and_writes_nothing_while_another_owner_still_uploads(
    capped: RunningApi,
) -> None:
    with capped.client(scopes=ALL_SCOPES) as owner, capped.client("owner-b", scopes=ALL_SCOPES) as other:
        first = created(upload(owner, b"a" * 600))
        assert_over_quota(upload(owner, b"b" * 600, name="second.txt"), used=600)
        assert file_ids(owner) == [first["id"]], "the refused upload left no file"

        theirs = created(upload(other, b"c" * 600))
        assert file_ids(other) == [theirs["id"]], "the cap is per owner"

        assert owner.delete(f"/files/{first['id']}").status_code == 200
        again = created(upload(owner, b"b" * 600, name="second.txt"))
        assert file_ids(owner) == [again["id"]], "deleting a file frees its room"
        assert owner.get(f"/files/{again['id']}/contents").content == b"b" * 600


def test_a_replacement_counts_its_new_size_not_the_old_one(capped: RunningApi) -> None:
    with capped.client(scopes=ALL_SCOPES) as owner:
        file = created(upload(owner, b"a" * 600))
        created(upload(owner, b"x" * 100, name="small.txt"))

        # 700 now; 850 with the 600 replaced by 750 fits, though 700 + 750 would not.
        replaced = replace(owner, file["id"], b"b" * 750)
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["revision"] == 2

        assert_over_quota(replace(owner, file["id"], b"c" * 901), used=100)
        assert owner.get(f"/files/{file['id']}").json()["revision"] == 2, "the refusal kept the revision"
        assert owner.get(f"/files/{file['id']}/contents").content == b"b" * 750, "and the contents"

        exactly = replace(owner, file["id"], b"d" * 900)
        assert exactly.status_code == 200, "up to the cap itself fits"
        assert exactly.json()["revision"] == 3


def test_zero_is_no_cap(tmp_path: Path, database_url: str) -> None:
    running = start_api(tmp_path, database_url, 0)
    try:
        with running.client(scopes=ALL_SCOPES) as owner:
            files = [created(upload(owner, b"a" * 600, name=f"{i}.txt")) for i in range(3)]
            assert len(file_ids(owner)) == 3
            replaced = replace(owner, files[0]["id"], b"b" * 2000)
            assert replaced.status_code == 200, replaced.text
    finally:
        running.close()


def test_the_default_cap_is_2_gib() -> None:
    """20 uploads at Serval's 100 MB a file; a Bible's text is a few MB."""
    assert LimitSettings().data_file_bytes_per_owner == 2 * 1024**3
    assert LimitSettings().data_file_bytes_per_owner >= 20 * ApiSettings().max_upload_bytes
