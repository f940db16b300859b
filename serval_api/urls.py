"""The REST address of each resource, for `url` fields, `Location` headers and webhook payloads.

`base_url` is `settings.api_base_url` (`api.public_url` when set).
"""

from __future__ import annotations

API = "/api/v1"


def engine_url(base_url: str, engine_id: str) -> str:
    return f"{base_url}{API}/translation/engines/{engine_id}"


def build_url(base_url: str, engine_id: str, build_id: str) -> str:
    return f"{engine_url(base_url, engine_id)}/builds/{build_id}"


def parallel_corpus_url(base_url: str, engine_id: str, parallel_corpus_id: str) -> str:
    return f"{engine_url(base_url, engine_id)}/parallel-corpora/{parallel_corpus_id}"


def engine_corpus_url(base_url: str, engine_id: str, corpus_id: str) -> str:
    return f"{engine_url(base_url, engine_id)}/corpora/{corpus_id}"


def file_url(base_url: str, file_id: str) -> str:
    return f"{base_url}{API}/files/{file_id}"


def corpus_url(base_url: str, corpus_id: str) -> str:
    return f"{base_url}{API}/corpora/{corpus_id}"


def hook_url(base_url: str, hook_id: str) -> str:
    return f"{base_url}{API}/hooks/{hook_id}"
