"""Serving the pages: `/` (the playground), `/admin` (the console) and their files under `/web/`.

- **Nothing secret server-side.** The pages are the same for everyone; each call the page makes
  carries the key the person typed (`X-API-Key`), so the admin console's data answers 403 to a
  key without the `admin` scope, and its HTML shows only the sign-in field.
- **A strict Content-Security-Policy.** Scripts and styles only from files of this service (no
  inline script or style, no `eval`), connections only to this service, no frames, no forms
  posted elsewhere.
- **Fast on a slow link.** The files are read once, gzipped once, and referenced with their
  content's hash (`/web/console.js?v=…`): a browser keeps them for a year and asks again only
  when a new release changes them; the HTML itself is revalidated (`ETag`) on every visit.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request, Response
from starlette.exceptions import HTTPException

from serval_common import families
from serval_common.families import Operation

router = APIRouter(include_in_schema=False)

PAGES = {"/": "playground.html", "/admin": "console.html"}
ASSETS: dict[str, str] = {
    "style.css": "text/css; charset=utf-8",
    "common.js": "text/javascript; charset=utf-8",
    "playground.js": "text/javascript; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
}
"""Every file `/web/` serves, in the order their references are rewritten (a file's hash covers
the hashed names of the files it imports)."""
HTML = "text/html; charset=utf-8"
ASSET_PREFIX = "/web/"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
FOREVER = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str

    @classmethod
    def of(cls, body: bytes, media_type: str) -> StaticFile:
        digest = hashlib.sha256(body).hexdigest()[:16]
        return cls(body, gzip.compress(body, 9, mtime=0), media_type, f'"{digest}"')

    @property
    def version(self) -> str:
        return self.etag.strip('"')


@cache
def files() -> dict[str, StaticFile]:
    """Every asset and page by name, each reference to an asset given its content's hash."""
    folder = resources.files(__package__).joinpath("static")
    done: dict[str, StaticFile] = {}
    for name, media_type in (*ASSETS.items(), *((page, HTML) for page in PAGES.values())):
        text = (
            folder.joinpath(name).read_text(encoding="utf-8").replace("{{INTERACTIVE_TYPES}}", _interactive())
        )
        done[name] = StaticFile.of(_versioned(text, done).encode(), media_type)
    return done


def _interactive() -> str:
    """The engine types the playground offers prefix completion for: those whose own model answers
    translate-prefix (the echo engine merely echoes)."""
    kinds = families.names(where=lambda f: f.answers(Operation.TRANSLATE_PREFIX) and not f.served_here)
    return " ".join(sorted(kinds))


_REFERENCE = re.compile(r"""(["'])(\./|/web/)([\w.-]+)\1""")


def _versioned(text: str, done: dict[str, StaticFile]) -> str:
    """`"/web/style.css"` and `"./common.js"` → the same with `?v=<hash>` of the file's content."""

    def versioned(match: re.Match[str]) -> str:
        quote, where, name = match.groups()
        known = done.get(name)
        return match.group(0) if known is None else f"{quote}{where}{name}?v={known.version}{quote}"

    return _REFERENCE.sub(versioned, text)


def _answer(request: Request, file: StaticFile, cache_control: str) -> Response:
    headers = {
        **SECURITY_HEADERS,
        "Cache-Control": cache_control,
        "ETag": file.etag,
        "Vary": "Accept-Encoding",
    }
    if file.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(file.gzipped, media_type=file.media_type, headers=headers)
    return Response(file.body, media_type=file.media_type, headers=headers)


@router.get("/")
async def playground(request: Request) -> Response:
    """Try a language pair: translation, alternatives, confidences, alignment, completion."""
    return _answer(request, files()[PAGES["/"]], REVALIDATE)


@router.get("/admin")
async def console(request: Request) -> Response:
    """The administrators' console: nodes, builds, engines and keys, health, live."""
    return _answer(request, files()[PAGES["/admin"]], REVALIDATE)


@router.get(ASSET_PREFIX + "{name}")
async def asset(name: str, request: Request) -> Response:
    """A page's script or style sheet; kept for a year when asked for by its hash."""
    if name not in ASSETS:
        raise HTTPException(404, f"no file {name[:60]!r} here")
    file = files()[name]
    fresh = request.query_params.get("v") == file.version
    return _answer(request, file, FOREVER if fresh else REVALIDATE)
