"""The translate path reuses API keys' and engines' records (`serval_api/service/lookups.py`): a
change made through the API must still be seen by the very next request."""

from __future__ import annotations

import httpx

from tests.api.conftest import RunningApi, wait_for_build
from tests.api.test_train_segment import SOURCE, TARGET, built_engine, train, translate


def test_changes_through_the_api_reach_the_next_translation(api: RunningApi, client: httpx.Client) -> None:
    engine_id = built_engine(api, client, engine_type="echo")
    first = translate(client, engine_id, SOURCE)
    assert first.status_code == 200 and first.headers["x-model-revision"] == "1"
    assert first.json()["translation"] == SOURCE

    assert train(client, engine_id, SOURCE, TARGET).status_code == 200
    assert translate(client, engine_id, SOURCE).json()["translation"] == TARGET

    rebuild = client.post(f"/translation/engines/{engine_id}/builds", json={})
    assert rebuild.status_code == 201 and wait_for_build(client, rebuild.json())["state"] == "Completed"
    assert translate(client, engine_id, "Something else.").headers["x-model-revision"] == "2"

    assert client.delete(f"/translation/engines/{engine_id}").status_code in (200, 204)
    assert translate(client, engine_id, SOURCE).status_code == 404


def test_a_cached_engine_stays_forbidden_to_other_owners(api: RunningApi, client: httpx.Client) -> None:
    """The translate path reads the cached engine record, and checks its owner as every path does: 403."""
    engine_id = built_engine(api, client, engine_type="echo")
    assert translate(client, engine_id, SOURCE).status_code == 200
    with api.client(owner="owner-b") as other:
        assert translate(other, engine_id, SOURCE).status_code == 403
    assert translate(client, engine_id, SOURCE).status_code == 200
