from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from boto3.exceptions import S3TransferFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError
from s3transfer.exceptions import RetriesExceededError

from serval_common.settings import S3_CONNECT_TIMEOUT_S, S3_MAX_ATTEMPTS, S3_READ_TIMEOUT_S
from serval_common.store.base import (
    ModelStore,
    ObjectMissing,
    StoreError,
    StoreUnavailable,
    check_key,
    error_chain,
)

# Large model files move in parallel ranged parts of 16 MiB.
TRANSFER = TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20, max_concurrency=8)


class S3Store(ModelStore):
    """A model store in an S3 bucket (AWS, MinIO, Ceph … any S3-compatible endpoint)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        connect_timeout_s: float = S3_CONNECT_TIMEOUT_S,
        read_timeout_s: float = S3_READ_TIMEOUT_S,
        max_attempts: int = S3_MAX_ATTEMPTS,
    ) -> None:
        """`connect_timeout_s`, `read_timeout_s` and `max_attempts` (the first included) bound each
        call: botocore's own defaults (60 s each, 5 legacy attempts) let an endpoint that accepts
        connections and never answers hold a call for minutes."""
        if not bucket:
            raise StoreError("an S3 model store URL needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(
                connect_timeout=connect_timeout_s,
                read_timeout=read_timeout_s,
                retries={"total_max_attempts": max_attempts, "mode": "standard"},
            ),
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, action: str, key: str, exc: Exception) -> StoreError:
        message = f"could not {action} {key} in {self.url}: {exc}"
        if _missing(exc):
            return ObjectMissing(message)
        if _transient(exc):
            return StoreUnavailable(message)
        return StoreError(message)

    def _read_bytes(self, key: str) -> bytes:
        try:
            body: bytes = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("read", key, exc) from exc
        return body

    def _write_bytes(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("write", key, exc) from exc

    def _upload_file(self, key: str, source: Path) -> None:
        try:
            self._client.upload_file(str(source), self.bucket, self._key(key), Config=TRANSFER)
        except (ClientError, BotoCoreError, RetriesExceededError, S3TransferFailedError) as exc:
            raise self._fail("upload", key, exc) from exc

    def _download_file(self, key: str, target: Path) -> None:
        try:
            self._client.download_file(self.bucket, self._key(key), str(target), Config=TRANSFER)
        except (ClientError, BotoCoreError, RetriesExceededError, S3TransferFailedError) as exc:
            raise self._fail("download", key, exc) from exc

    def _iter_bytes(self, key: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            yield from body.iter_chunks(chunk_size)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("read", key, exc) from exc

    def _exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._fail("check", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("check", key, exc) from exc
        return True

    def _objects(self, prefix: str) -> list[str]:
        base = self._key(prefix.strip("/")) + "/"
        keys: list[str] = []
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base
            ):
                keys.extend(obj["Key"] for obj in page.get("Contents", []))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc
        return keys

    def _list_keys(self, prefix: str) -> list[str]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(key[strip:] for key in self._objects(prefix))

    def _delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("delete", key, exc) from exc

    def _delete_prefix(self, prefix: str) -> None:
        keys = self._objects(prefix)
        for start in range(0, len(keys), 1000):
            batch = [{"Key": key} for key in keys[start : start + 1000]]
            self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch})


_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})
_TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "InternalError",
        "ServiceUnavailable",
    }
)
_TRANSIENT_ERRORS = (
    BotoConnectionError,
    HTTPClientError,
    IncompleteReadError,
    RetriesExceededError,
    S3TransferFailedError,
    ConnectionError,
    TimeoutError,
)


def _client_error(exc: BaseException) -> tuple[str, int] | None:
    """(error code, HTTP status) of a botocore ClientError, None for anything else."""
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def _missing(exc: BaseException) -> bool:
    errors = [_client_error(cause) for cause in error_chain(exc)]
    return any(e is not None and (e[0] in _MISSING_CODES or e[1] == 404) for e in errors)


def _transient(exc: BaseException) -> bool:
    for cause in error_chain(exc):
        if isinstance(cause, _TRANSIENT_ERRORS):
            return True
        error = _client_error(cause)
        if error is not None and (error[0] in _TRANSIENT_CODES or error[1] >= 500 or error[1] == 429):
            return True
    return False
