"""The REST address of each resource, for `url` fields, `Location` headers and webhook payloads.

`base_url` is `settings.api_base_url` (`api.public_url` when set).
"""

from __future__ import annotations

API = "/api/v1"


def engine_url(base_url: str, engine_id: str, *, word_alignment: bool = False) -> str:
    """`word_alignment`: the engine is a word-alignment engine, under `/word-alignment/engines`."""
    kind = "word-alignment" if word_alignment else "translation"
    return f"{base_url}{API}/{kind}/engines/{engine_id}"


def build_url(base_url: str, engine_id: str, build_id: str, *, word_alignment: bool = False) -> str:
    return f"{engine_url(base_url, engine_id, word_alignment=word_alignment)}/builds/{build_id}"


def parallel_corpus_url(
    base_url: str, engine_id: str, parallel_corpus_id: str, *, word_alignment: bool = False
) -> str:
    engine = engine_url(base_url, engine_id, word_alignment=word_alignment)
    return f"{engine}/parallel-corpora/{parallel_corpus_id}"


def engine_corpus_url(base_url: str, engine_id: str, corpus_id: str) -> str:
    return f"{engine_url(base_url, engine_id)}/corpora/{corpus_id}"


def file_url(base_url: str, file_id: str) -> str:
    return f"{base_url}{API}/files/{file_id}"


def corpus_url(base_url: str, corpus_id: str) -> str:
    return f"{base_url}{API}/corpora/{corpus_id}"


def hook_url(base_url: str, hook_id: str) -> str:
    return f"{base_url}{API}/hooks/{hook_id}"


def api_key_url(base_url: str, key_id: str) -> str:
    return f"{base_url}{API}/api-keys/{key_id}"
