from __future__ import annotations

import json

import httpx

from tests.api.conftest import RunningApi, create_engine


def test_start_build_answers_201_pending_and_launches_a_job(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    response = client.post(f"{base}/builds", json={"name": "first", "options": {"max_steps": 10}})
    assert response.status_code == 201
    build = response.json()
    assert build["state"] == "Pending"
    assert build["revision"] == 1
    assert build["name"] == "first"
    assert build["engine"] == {"id": engine["id"], "url": engine["url"]}
    assert build["url"] == f"{engine['url']}/builds/{build['id']}"
    assert build["options"] == {"max_steps": 10}
    assert "trainOn" not in build
    assert response.headers["location"] == build["url"]

    spec = api.launcher.specs[-1]
    assert (spec.build_id, spec.engine_id) == (build["id"], engine["id"])
    assert (spec.source_language, spec.target_language) == ("eng_Latn", "swh_Latn")
    assert spec.revision == 1 and spec.train is False
    assert json.loads(spec.options_json) == {"max_steps": 10}
    assert spec.api_address == api.grpc_target
    assert client.get(base).json()["isBuilding"] is True
    assert client.get(f"{base}/builds/{build['id']}").json() == build
    assert [b["id"] for b in client.get(f"{base}/builds").json()] == [build["id"]]


def test_second_build_while_pending_is_409(client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}/builds"
    assert client.post(base, json={}).status_code == 201
    second = client.post(base, json={"trainOn": []})
    assert second.status_code == 409
    assert "already has a build" in second.json()["message"]


def test_train_on_unknown_corpus_is_400(client: httpx.Client) -> None:
    engine = create_engine(client)
    response = client.post(
        f"/translation/engines/{engine['id']}/builds", json={"trainOn": [{"parallelCorpusId": "pc1"}]}
    )
    assert response.status_code == 400
    assert "unknown parallel corpus" in response.json()["message"]


def test_current_build_and_cancel(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    assert client.get(f"{base}/current-build").status_code == 204
    assert client.post(f"{base}/current-build/cancel").status_code == 204
    build = client.post(f"{base}/builds", json={}).json()
    assert client.get(f"{base}/current-build").json()["id"] == build["id"]

    canceled = client.post(f"{base}/current-build/cancel")
    assert canceled.status_code == 200
    assert canceled.json()["state"] == "Canceled"
    assert canceled.json()["revision"] == 2
    assert api.launcher.canceled == [build["id"]]
    assert client.get(f"{base}/current-build").status_code == 204
    assert client.get(base).json()["isBuilding"] is False


def test_long_poll_times_out_with_408(client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    build = client.post(f"{base}/builds", json={}).json()
    response = client.get(f"{base}/builds/{build['id']}", params={"min-revision": 5})
    assert response.status_code == 408
    assert client.get(f"{base}/current-build", params={"min-revision": 5}).status_code == 408


def test_bad_build_options_are_refused_before_the_build_exists(api: RunningApi, client: httpx.Client) -> None:
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"
    for options, word in (({"maxSteps": "many"}, "maxSteps"), ({"lrSchedule": "sawtooth"}, "lrSchedule")):
        refused = client.post(f"{base}/builds", json={"options": options})
        assert refused.status_code == 400 and word in refused.text
    assert client.get(f"{base}/builds").json() == []
    accepted = client.post(f"{base}/builds", json={"options": {"maxSteps": 5, "freeze": ["encoder"]}})
    assert accepted.status_code == 201
