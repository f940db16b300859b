"""How the API service serves its two web pages (`/`, `/admin`) and their files (`/web/…`): a strict
Content-Security-Policy, nothing from another site, no inline script or style, gzip, hashed
references kept for a year, a few tens of kilobytes in all (docs/web-pages.md). The pages in a
browser: tests/e2e/test_web_pages.py."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from serval_api.web import pages
from tests.api.conftest import RunningApi


@pytest.fixture
def http(api: RunningApi) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.rest_url, timeout=10) as client:
        yield client


@pytest.mark.parametrize("path", ["/", "/admin"])
def test_pages_are_served_with_a_strict_policy(http: httpx.Client, path: str) -> None:
    page = http.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy and "unsafe" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-cache"
    assert page.headers["content-encoding"] == "gzip"
    assert "<script>" not in page.text and "style=" not in page.text, "no inline script or style"
    assets = re.findall(r'(?:src|href)="(/web/[^"]+)"', page.text)
    assert assets and all("?v=" in a for a in assets), assets
    for asset in assets:
        answer = http.get(asset)
        assert answer.status_code == 200, asset
        assert answer.headers["cache-control"] == pages.FOREVER
    again = http.get(path, headers={"If-None-Match": page.headers["etag"]})
    assert again.status_code == 304


def test_files_are_small_and_from_this_service_only() -> None:
    files = pages.files()
    assert set(files) == {*pages.ASSETS, *pages.PAGES.values()}
    total = sum(len(f.gzipped) for f in files.values())
    assert total < 40_000, f"{total} bytes gzipped: the pages must load fast on a slow link"
    for name, file in files.items():
        text = file.body.decode()
        assert not re.search(r"""(?:src|href|url)\s*[=(]\s*["']?(?:https?:)?//""", text), name
        assert "eval(" not in text and "innerHTML" not in text, name


def test_unknown_files_and_stale_hashes(http: httpx.Client) -> None:
    assert http.get("/web/secrets.py").status_code == 404
    assert http.get("/web/..%2Fpages.py").status_code == 404
    stale = http.get("/web/common.js", params={"v": "0000"})
    assert stale.status_code == 200 and stale.headers["cache-control"] == pages.REVALIDATE
    plain = http.get("/web/style.css", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.text.startswith(
        pages.files()["style.css"].body.decode()[:20]
    )
