"""Property-based fuzzing of every REST operation in the served OpenAPI document: no 5xx, and
every answer's status, content type and body match what the document promises."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from serval_api.auth import ADMIN, ALL_SCOPES
from tests.api.conftest import RunningApi, create_engine, wait_for_build

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))
MODES = {
    GenerationMode.POSITIVE: [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ],
    GenerationMode.NEGATIVE: [not_a_server_error, status_code_conformance],
}
REAL_ID_EXEMPT = {"DELETE"}
ADMIN_PATHS = ("/api/v1/api-keys",)
"""Operations only an administrator reaches: fuzzed with an admin key, so their handlers run."""

# Runs once: `make test` runs it on the PostgreSQL pass (tests/conftest.py, POSTGRES_PASS_MODULES), a
# plain `pytest` on SQLite.
# 420 s: every operation of the document, LibreTranslate's root routes included, on two shared cores.
pytestmark = [pytest.mark.timeout(420), pytest.mark.sqlite_pass_only]


POLL_WINDOW_S = 0.5
"""The long-poll window while fuzzing: each waiting example (next-finished, min-revision) still ends
in its 408, in half a second rather than the 40 s a client's poll gets."""


def test_every_operation_survives_fuzzing(api: RunningApi, client: httpx.Client) -> None:
    api.service.services.long_poll_max_s = POLL_WINDOW_S
    engine = create_engine(client, "echo")
    wait_for_build(client, client.post(f"/translation/engines/{engine['id']}/builds", json={}).json())
    headers = {"X-API-Key": api.api_key(scopes=ALL_SCOPES)}
    admin = {"X-API-Key": api.api_key("fuzz-admin", scopes=(ADMIN,))}
    real_ids = {
        "engine_id": engine["id"],
        **_file_and_corpus(api.rest_url, headers, engine["id"]),
        **_key(api.rest_url, admin),
    }
    schema = schemathesis.openapi.from_dict(httpx.get(f"{api.rest_url}/openapi.json").json())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15

    failures: list[str] = []
    for operation, (mode, checks) in itertools.product(operations, MODES.items()):
        caller = admin if operation.path.startswith(ADMIN_PATHS) else headers
        fuzz = _fuzzer(operation.as_strategy(mode), checks, api.rest_url, caller, real_ids)
        try:
            fuzz()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, f"{operation.label}: no valid example"
        except Exception as e:
            failures.append(f"{operation.label} ({mode.value}): {e}")
    assert not failures, "\n\n".join(failures)


def _file_and_corpus(base_url: str, headers: dict[str, str], engine_id: str) -> dict[str, str]:
    with httpx.Client(base_url=f"{base_url}/api/v1", headers=headers, timeout=60) as client:
        uploaded = client.post(
            "/files", files={"file": ("a.txt", b"hello\n")}, data={"format": "Text", "name": "a"}
        )
        if uploaded.status_code != 201:
            return {}
        file_id = uploaded.json()["id"]
        corpus = client.post("/corpora", json={"language": "en", "files": [{"fileId": file_id}]})
        files = [{"fileId": file_id}]
        engine_corpus = client.post(
            f"/translation/engines/{engine_id}/corpora",
            json={"sourceLanguage": "en", "targetLanguage": "sw", "sourceFiles": files, "targetFiles": files},
        )
        pc = (
            client.post(
                f"/translation/engines/{engine_id}/parallel-corpora",
                json={"sourceCorpusIds": [corpus.json()["id"]], "targetCorpusIds": [corpus.json()["id"]]},
            )
            if corpus.status_code == 201
            else None
        )
        return {
            "file_id": file_id,
            **({"corpus_id": corpus.json()["id"]} if corpus.status_code == 201 else {}),
            **({"parallel_corpus_id": pc.json()["id"]} if pc is not None and pc.status_code == 201 else {}),
            **({"engine_corpus_id": engine_corpus.json()["id"]} if engine_corpus.status_code == 201 else {}),
        }


def _key(base_url: str, admin: dict[str, str]) -> dict[str, str]:
    """A key made over Serval 1.20's key management, for the operations that read one."""
    body = {"clientId": "fuzzed", "name": "fuzz", "scopes": ["read:files"]}
    created = httpx.post(f"{base_url}/api/v1/api-keys", headers=admin, json=body)
    return {"key_id": created.json()["id"]} if created.status_code == 201 else {}


def _fuzzer(
    cases: SearchStrategy[Any],
    checks: list[Any],
    base_url: str,
    headers: dict[str, str],
    real_ids: dict[str, str],
) -> Callable[[], None]:
    """Every other example of an operation targets real entities, so handlers past the 404 run."""
    turn = itertools.count()

    @hypothesis_settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def fuzz(case: Any) -> None:
        if next(turn) % 2 and case.method.upper() not in REAL_ID_EXEMPT and case.path_parameters:
            case.path_parameters.update({k: v for k, v in real_ids.items() if k in case.path_parameters})
        case.call_and_validate(base_url=base_url, headers=headers, checks=checks)

    return fuzz  # type: ignore[no-any-return]
