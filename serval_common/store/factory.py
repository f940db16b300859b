"""Opening the model store a URL or the settings name: the one place that knows every kind of store."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from serval_common.settings import Settings
from serval_common.store.base import ModelStore, StoreError
from serval_common.store.local import LocalStore


def open_store(url: str, **s3_options: Any) -> ModelStore:
    """Open `file:///path` (or a bare path) as a local store, `s3://bucket/prefix` as S3."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return LocalStore(Path(parsed.path if parsed.scheme else url))
    if parsed.scheme == "s3":
        from serval_common.store.s3 import S3Store  # boto3 loads only where a store is on S3

        return S3Store(bucket=parsed.netloc, prefix=parsed.path.strip("/"), **s3_options)
    raise StoreError(f"unsupported model store URL {url!r}: use file:///path or s3://bucket/prefix")


def store_from_settings(settings: Settings, url: str | None = None) -> ModelStore:
    """The model store the settings name (or `url` in it, e.g. the one a build job was given)."""
    return open_store(
        url or settings.resolved_store_url,
        endpoint_url=settings.store.s3_endpoint_url,
        region=settings.store.s3_region,
        access_key_id=settings.store.s3_access_key_id,
        secret_access_key=settings.store.s3_secret_access_key,
        connect_timeout_s=settings.store.s3_connect_timeout_s,
        read_timeout_s=settings.store.s3_read_timeout_s,
        max_attempts=settings.store.s3_max_attempts,
    )
