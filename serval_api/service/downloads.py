"""Model download URLs: the API service itself serves a `.tar.gz` of an engine's model revision
at `/api/v1/model-downloads/{token}`, for every kind of model store.

The token is `base64url(payload).base64url(HMAC-SHA256(payload))` over the JSON payload
`{engineId, revision, exp}`, keyed by `api.download_secret` (random per process when unset, so
replicas behind one load balancer need a shared secret). Holding the URL is the credential.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import secrets
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from serval_api.auth import READ_ENGINES, Caller
from serval_api.errors import NotFound, PermissionDenied
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine
from serval_common.families import family
from serval_common.manifest import MANIFEST, Manifest, ManifestError, resolve_revision
from serval_common.model_revision import ModelRevision
from serval_common.settings import Settings
from serval_common.store import ModelStore, StoreError, store_from_settings

DOWNLOAD_PATH = "/api/v1/model-downloads"
ECHO_MODEL_URL = "https://example.com/model"
"""What Serval's echo engine service answers for its model's URL: a placeholder at a domain reserved
for examples (RFC 2606), since an echo engine has no model."""
CHUNK = 1 << 20
_PROCESS_SECRET = secrets.token_bytes(32)


@dataclass(frozen=True)
class DownloadUrl:
    url: str
    model_revision: int
    expires_at: datetime


@dataclass(frozen=True)
class DownloadGrant:
    engine_id: str
    revision: int


async def model_download_url(
    services: Services, caller: Caller, engine_id: str, *, ttl_s: float | None = None
) -> DownloadUrl:
    """404 while the engine has no model yet. An engine type that keeps no model (echo) answers, as
    Serval's echo engine does, a placeholder: `ECHO_MODEL_URL`, which is no model download."""
    caller.require(READ_ENGINES)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id)
        revision = engine.model_revision
        engine_type = engine.type
    if revision <= 0:
        raise NotFound(f"engine {engine_id} has no model yet: build it first")
    expires = math.ceil(time.time() + (services.settings.api.download_url_ttl_s if ttl_s is None else ttl_s))
    if family(engine_type).served_here:
        return DownloadUrl(ECHO_MODEL_URL, revision, datetime.fromtimestamp(expires, UTC))
    token = sign({"engineId": engine_id, "revision": revision, "exp": expires}, _secret(services.settings))
    return DownloadUrl(
        url=f"{services.settings.api_base_url}{DOWNLOAD_PATH}/{token}",
        model_revision=revision,
        expires_at=datetime.fromtimestamp(expires, UTC),
    )


def sign(payload: dict[str, object], secret: bytes) -> str:
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    mac = hmac.new(secret, body, hashlib.sha256).digest()
    return f"{_b64(body)}.{_b64(mac)}"


def verify(settings: Settings, token: str, *, now: float | None = None) -> DownloadGrant:
    refused = PermissionDenied("this model download URL is invalid; ask for a new one")
    body_text, _, mac_text = token.partition(".")
    try:
        body, mac = _unb64(body_text), _unb64(mac_text)
    except (binascii.Error, ValueError):
        raise refused from None
    if not hmac.compare_digest(mac, hmac.new(_secret(settings), body, hashlib.sha256).digest()):
        raise refused
    payload = json.loads(body)
    if payload["exp"] < (time.time() if now is None else now):
        raise PermissionDenied("this model download URL has expired; ask for a new one")
    return DownloadGrant(engine_id=str(payload["engineId"]), revision=int(payload["revision"]))


def open_archive(settings: Settings, grant: DownloadGrant) -> Iterator[bytes]:
    """Read the manifests now (404 while the revision is not published) and return a lazy
    stream of the gzipped tar: `manifest.json` and the model files, following `weights_from`."""
    store = store_from_settings(settings)
    prefix = ModelRevision(grant.engine_id, grant.revision).location
    try:
        resolved = resolve_revision(store, prefix)
        manifest, files_prefix, files = resolved.manifest, resolved.files_prefix, resolved.files_manifest
    except ManifestError as e:
        raise NotFound(f"model revision {grant.revision} of engine {grant.engine_id} is not available") from e
    return _gzip(_tar(store, manifest, files_prefix, files))


def _tar(store: ModelStore, manifest: Manifest, files_prefix: str, files: Manifest) -> Iterator[bytes]:
    manifest_bytes = manifest.model_dump_json(indent=2).encode()
    yield _header(MANIFEST, len(manifest_bytes))
    yield manifest_bytes + _padding(len(manifest_bytes))
    for entry in files.files:
        yield _header(entry.path, entry.size)
        sent = 0
        for chunk in store.iter_bytes(f"{files_prefix}/{entry.path}", CHUNK):
            sent += len(chunk)
            if sent > entry.size:
                raise StoreError(f"{files_prefix}/{entry.path} is larger than its manifest says")
            yield chunk
        if sent != entry.size:
            raise StoreError(f"{files_prefix}/{entry.path} is smaller than its manifest says")
        yield _padding(entry.size)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _gzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    for chunk in chunks:
        out = compressor.compress(chunk)
        if out:
            yield out
    yield compressor.flush()


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = int(time.time())
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _secret(settings: Settings) -> bytes:
    configured = settings.api.download_secret
    return configured.encode() if configured else _PROCESS_SECRET


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text:
        raise ValueError("empty")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
