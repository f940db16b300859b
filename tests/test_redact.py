"""The one sanitizer for client-visible text (serval_common/redact.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serval_common.redact import redact, secret_values
from serval_common.settings import Settings


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("could not read k in s3://bucket/prefix: boom", "could not read k in <url>: boom"),
        (
            'Could not connect to the endpoint URL: "http://10.0.0.5:9000/b/k"',
            'Could not connect to the endpoint URL: "<url>"',
        ),
        ("No such file: '/srv/serval/store/files/x'", "No such file: '<path>'"),
        (r"C:\Users\ops\store\x.bin is locked", "<path> is locked"),
        ("login failed: password='hunter2' user=serval", "login failed: password=*** user=serval"),
        ("key AKIAABCDEFGHIJKLMNOP refused", "key *** refused"),
        ("Authorization: Bearer eyJhbGciOi.abc.def", "Authorization: Bearer ***"),
        ("models/e1/2/model.bin failed its checksum", "models/e1/2/model.bin failed its checksum"),
        ("MAT 1:1/2 and text id a/b stay", "MAT 1:1/2 and text id a/b stay"),
    ],
)
def test_redact_masks_urls_paths_and_credentials(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_last_guard_keeps_a_clients_own_http_url_but_not_credentials_or_store_urls() -> None:
    text = "payloadUrl: 'https://hooks.example/a' refused; store s3://b/p; db postgresql://u:pw@db/x"
    assert (
        redact(text, every_url=False)
        == "payloadUrl: 'https://hooks.example/a' refused; store <url>; db <url>"
    )
    assert redact("see https://user:pw@hooks.example/a", every_url=False) == "see https://***@hooks.example/a"


def test_the_settings_secrets_are_masked_wherever_they_appear(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        store={
            "url": "s3://models/p",
            "s3_access_key_id": "plainkeyid",
            "s3_secret_access_key": "plainsecret",
        },
        auth={"jwt_secret": "jwtsecretvalue"},
    )
    known = secret_values(settings)
    text = f"plainkeyid plainsecret jwtsecretvalue {tmp_path}"
    assert redact(text, known) == "*** *** *** ***"
