from __future__ import annotations

from serval_api.auth import READ_STATUS
from serval_api.db import mark_node_gone, upsert_node
from tests.api.conftest import RunningApi


def test_connected_nodes_show_in_health(api: RunningApi) -> None:
    assert api.service.services is not None
    db = api.service.services.db
    api.run(upsert_node(db, "gpu-1", device="cuda:0 H200", session_id="s1", free_slots=64))
    with api.client(scopes=(READ_STATUS,)) as client:
        health = client.get("/status/health").json()
        assert (health["status"], health["results"]["nodes"]["data"]["connected"]) == ("Healthy", "1")
        api.run(mark_node_gone(db, "gpu-1", "s1"))
        assert client.get("/status/health").json()["results"]["nodes"]["data"]["connected"] == "0"
