"""The one sanitizer for text that leaves this service for a client: error messages, build
messages, health entries and the failure texts inference nodes send.

Such text is often an exception's `str()`, which names model store URLs (`s3://bucket/prefix`,
`file:///srv/store`, an S3 endpoint), local paths, database URLs and at times credentials. Two
strengths:

- `redact(text)` masks every URL, every absolute path, credentials in URLs, `secret=…` style
  values and the settings' own secret values: for text made from exceptions.
- `redact(text, every_url=False)` keeps http(s) URLs without credentials (a webhook's own
  `payloadUrl` a client is told about): the last guard on every client error message.

The full text belongs in the log, under an error id the client is given (`error_reference`).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serval_common.settings import Settings

URL_MASK = "<url>"
PATH_MASK = "<path>"
SECRET_MASK = "***"

_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@'\"]*@")
_SECRET_VALUES = re.compile(
    r"(?i)\b([\w-]*(?:password|passwd|pwd|secret|token|signature|credential|access[_-]?key|api[_-]?key)"
    r"[\w-]*)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&)'\"]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]+")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
_URL_REST = r"(?:[^\s'\"<>]*[^\s'\"<>.,;:)\]])?"
"""A URL runs to whitespace or a quote, and ends before trailing punctuation."""
_STORE_URL = re.compile(
    r"(?i)\b(?:s3|s3a|gs|gcs|az|abfss?|wasbs?|file|postgres(?:ql)?(?:\+\w+)?|sqlite(?:\+\w+)?)"
    rf"://{_URL_REST}"
)
_ANY_URL = re.compile(rf"(?i)\b[a-z][a-z0-9+.-]*://{_URL_REST}")
_PATH_CHAR = r"[\w.@+~%=-]"
_POSIX_PATH = re.compile(rf"(?<![\w.:/~\\-])/(?:{_PATH_CHAR}+/)+{_PATH_CHAR}*")
_WINDOWS_PATH = re.compile(rf"(?i)(?<![\w])[a-z]:\\(?:{_PATH_CHAR}+\\)*{_PATH_CHAR}*")
_SHORTEST_SECRET = 4


def redact(text: str, known: Iterable[str] = (), *, every_url: bool = True) -> str:
    """`text` with store/database URLs, local paths and credentials masked, and each of `known`
    (secret values, the store's URL and root, see `secret_values`) wherever it appears."""
    for value in sorted({v for v in known if len(v) >= _SHORTEST_SECRET}, key=len, reverse=True):
        text = text.replace(value, SECRET_MASK)
    text = _URL_CREDENTIALS.sub(rf"\1{SECRET_MASK}@", text)
    text = _BEARER.sub(rf"\1{SECRET_MASK}", text)
    text = _AWS_KEY_ID.sub(SECRET_MASK, text)
    text = (_ANY_URL if every_url else _STORE_URL).sub(URL_MASK, text)
    if every_url:
        text = _SECRET_VALUES.sub(rf"\1\2{SECRET_MASK}", text)
    text = _POSIX_PATH.sub(PATH_MASK, text)
    return _WINDOWS_PATH.sub(PATH_MASK, text)


def secret_values(settings: Settings) -> tuple[str, ...]:
    """What no client may read, whatever text it turns up in: credentials, the store's and the
    database's URLs, and the local folders of this process."""
    store, auth, clearml = settings.store, settings.auth, settings.jobs.clearml
    values = [
        settings.resolved_store_url,
        settings.resolved_database_url,
        str(settings.home.resolve()),
        str(settings.node_cache_dir),
        store.s3_endpoint_url,
        store.s3_access_key_id,
        store.s3_secret_access_key,
        auth.jwt_secret,
        auth.jwks_url,
        settings.api.download_secret,
        settings.node.token,
        clearml.access_key,
        clearml.secret_key,
    ]
    if settings.resolved_store_url.startswith("file://"):
        values.append(settings.resolved_store_url.removeprefix("file://"))
    return tuple(v for v in values if v)


def new_error_id() -> str:
    return secrets.token_hex(6)


def describe(cause: BaseException | str) -> str:
    if isinstance(cause, str):
        return cause
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def error_reference(
    public: str, cause: BaseException | str, logger: logging.Logger, ids: Mapping[str, object]
) -> str:
    """`public` plus a new error id for the client; the cause's full text is logged under that id
    with `ids` (engine_id, build_id, node_id, request_id …)."""
    error_id = new_error_id()
    logger.warning(
        public,
        extra={**ids, "error_id": error_id, "error": describe(cause)},
        exc_info=cause if isinstance(cause, BaseException) else None,
    )
    return f"{public} (error id {error_id})"
