"""Rows of the access matrix (tests/api/test_access_matrix.py) and the world they run against.

A REST row is one line: `Rest(method, route path, scope, ok statuses, json=…)`; `scope` is the one
scope that grants the call, or a tuple of scopes each of which does (Serval's first, then this
service's older one, e.g. `(READ_FILES, READ_CORPORA)` on `/corpora`). Path parameters
are filled from `World` by name (`{engine_id}`, `{build_id}`, `{file_id}`, `{corpus_id}`, `{pc_id}`,
`{engine_corpus_id}`, …); a row whose path names one of `OWNED_PARAMS` is also checked with
another owner's key.
Bodies may be callables of the world, for ids the body must carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import grpc
import httpx
from google.protobuf.message import Message

from serval_api.auth import ALL_SCOPES, READ_ENGINES
from serval_api.service.keys import create_api_key, create_node_token
from tests.api.conftest import RunningApi, create_engine

OWNER = "owner-a"
OTHER_OWNER = "owner-b"
OWNED_PARAMS = frozenset(
    {
        "engine_id",
        "build_id",
        "file_id",
        "corpus_id",
        "pc_id",
        "parallel_corpus_id",
        "hook_id",
        "engine_corpus_id",
    }
)
NEW_HOOK = {"payloadUrl": "https://example.com/hook", "secret": "s", "events": ["TranslationBuildFinished"]}

Body = Any | Callable[["World"], Any]


def _params(path: str) -> list[str]:
    return re.findall(r"{(\w+)}", path)


@dataclass(frozen=True)
class Rest:
    method: str
    path: str
    scope: str | tuple[str, ...] | None
    ok: int | tuple[int, ...]
    json: Body = None
    files: Body = None
    data: Body = None
    query: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    """Path parameter → the `World` value that fills it, where not the one of the same name (a
    word-alignment route's `{engine_id}` is `wa_engine_id`)."""

    @property
    def key(self) -> tuple[str, str]:
        return self.method, self.path

    @property
    def scopes(self) -> tuple[str, ...]:
        """Every scope that grants the call on its own; none for a call any credential may make."""
        if self.scope is None:
            return ()
        return self.scope if isinstance(self.scope, tuple) else (self.scope,)

    @property
    def owned(self) -> bool:
        return any(p in OWNED_PARAMS for p in _params(self.path))

    @property
    def ok_statuses(self) -> tuple[int, ...]:
        return self.ok if isinstance(self.ok, tuple) else (self.ok,)

    def call(self, world: World, client: httpx.Client) -> httpx.Response:
        url = self.path.format(**{p: world.param(self.ids.get(p, p)) for p in _params(self.path)})
        return client.request(
            self.method,
            url,
            params=self.query or None,
            json=world.resolve(self.json),
            files=world.resolve(self.files),
            data=world.resolve(self.data),
        )


@dataclass(frozen=True)
class Grpc:
    method: str
    """`/package.Service/Method`."""
    scope: str | tuple[str, ...] | None
    """As `Rest.scope`."""
    request: Callable[[World], Message]
    ok: tuple[grpc.StatusCode, ...] = (grpc.StatusCode.OK,)
    owned: bool = True

    @property
    def scopes(self) -> tuple[str, ...]:
        if self.scope is None:
            return ()
        return self.scope if isinstance(self.scope, tuple) else (self.scope,)


class World:
    """What owner A holds for one row: created on first use, so each row pays only for its needs."""

    def __init__(self, api: RunningApi) -> None:
        self.api = api
        self.owner_key = api.api_key(OWNER, ALL_SCOPES)
        self.client = httpx.Client(
            base_url=f"{api.rest_url}/api/v1", headers={"X-API-Key": self.owner_key}, timeout=10
        )

    def close(self) -> None:
        self.client.close()

    def resolve(self, body: Body) -> Any:
        return body(self) if callable(body) else body

    def param(self, name: str) -> str:
        fixed = {
            "engine_type": "nmt",
            "wa_engine_type": "statistical",
            "language": "en",
            "n": "2",
            "text_id": "MAT",
        }
        if name in fixed:
            return fixed[name]
        value = getattr(self, name, None)
        assert isinstance(value, str), f"the access matrix has no value for the path parameter {{{name}}}"
        return value

    def _created(self, response: httpx.Response) -> str:
        assert response.status_code == 201, response.text
        value: str = response.json()["id"]
        return value

    @cached_property
    def node_id(self) -> str:
        """A node the API service has a record of, though it is not connected."""
        from serval_api.db.nodes import upsert_node

        assert self.api.service.services is not None
        self.api.run(upsert_node(self.api.service.services.db, "access-node", device="cpu:0 int8"))
        return "access-node"

    @cached_property
    def engine_id(self) -> str:
        engine_id: str = create_engine(self.client)["id"]
        return engine_id

    @cached_property
    def build_id(self) -> str:
        return self._created(self.client.post(f"/translation/engines/{self.engine_id}/builds", json={}))

    @cached_property
    def file_id(self) -> str:
        return self._created(
            self.client.post(
                "/files",
                files={"file": ("a.txt", b"hello\nworld\n", "text/plain")},
                data={"format": "Text", "name": "a"},
            )
        )

    def corpus(self, language: str) -> str:
        body = {"language": language, "files": [{"fileId": self.file_id}]}
        return self._created(self.client.post("/corpora", json=body))

    @cached_property
    def corpus_id(self) -> str:
        return self.corpus("en")

    @cached_property
    def pc_id(self) -> str:
        body = {"sourceCorpusIds": [self.corpus_id], "targetCorpusIds": [self.corpus("sw")]}
        return self._created(
            self.client.post(f"/translation/engines/{self.engine_id}/parallel-corpora", json=body)
        )

    @property
    def parallel_corpus_id(self) -> str:
        return self.pc_id

    @cached_property
    def wa_engine_id(self) -> str:
        """A word-alignment (`statistical`) engine of the owner's."""
        body = {"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
        return self._created(self.client.post("/word-alignment/engines", json=body))

    @cached_property
    def wa_build_id(self) -> str:
        return self._created(self.client.post(f"/word-alignment/engines/{self.wa_engine_id}/builds", json={}))

    @cached_property
    def wa_pc_id(self) -> str:
        body = {"sourceCorpusIds": [self.corpus_id], "targetCorpusIds": [self.corpus("sw")]}
        return self._created(
            self.client.post(f"/word-alignment/engines/{self.wa_engine_id}/parallel-corpora", json=body)
        )

    @cached_property
    def hook_id(self) -> str:
        return self._created(self.client.post("/hooks", json=NEW_HOOK))

    @cached_property
    def engine_corpus_id(self) -> str:
        files = [{"fileId": self.file_id}]
        body = {"sourceLanguage": "en", "targetLanguage": "sw", "sourceFiles": files, "targetFiles": files}
        return self._created(self.client.post(f"/translation/engines/{self.engine_id}/corpora", json=body))

    @cached_property
    def key_id(self) -> str:
        assert self.api.service.services is not None
        record, _ = self.api.run(create_api_key(self.api.service.services.db, "someone", ["read:files"]))
        return record.id

    @cached_property
    def token_id(self) -> str:
        assert self.api.service.services is not None
        record, _ = self.api.run(create_node_token(self.api.service.services.db, "pool"))
        return record.id


SIL_CONVERTERS = "/api/v1/translate"
SIL_CONVERTERS_TEXT = {"sourceLanguage": "eng_Latn", "targetLanguage": "swh_Latn", "text": "Hello."}
NO_PUBLIC_BASE_MODEL = (400,)
SIL_CONVERTERS_ENDPOINTS = [
    Rest("POST", SIL_CONVERTERS + "/", READ_ENGINES, NO_PUBLIC_BASE_MODEL, json=SIL_CONVERTERS_TEXT),
    Rest("POST", SIL_CONVERTERS, READ_ENGINES, NO_PUBLIC_BASE_MODEL, json=SIL_CONVERTERS_TEXT),
    Rest("GET", SIL_CONVERTERS + "/languages/", READ_ENGINES, NO_PUBLIC_BASE_MODEL),
    Rest("GET", SIL_CONVERTERS + "/languages", READ_ENGINES, NO_PUBLIC_BASE_MODEL),
]
"""SIL Converters' NLLB Translator (serval_api/rest/sil_converters.py): the slashed paths it asks
for and the slashless ones, which answer too. The matrix's model store publishes no public base
model, so an unbound key of the owner gets that readable 400; tests/e2e/test_sil_converters.py
translates."""
