from __future__ import annotations

import httpx

from tests.api.conftest import MAX_SEGMENT_CHARS, RunningApi, create_engine, wait_for_build


def test_create_engine_answers_201_with_the_contract_shape(api: RunningApi, client: httpx.Client) -> None:
    response = client.post(
        "/translation/engines",
        json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt", "name": "my engine"},
    )
    assert response.status_code == 201
    engine = response.json()
    assert len(engine["id"]) == 24
    assert engine["url"] == f"{api.rest_url}/api/v1/translation/engines/{engine['id']}"
    assert response.headers["location"] == engine["url"]
    assert engine == {
        "id": engine["id"],
        "url": engine["url"],
        "name": "my engine",
        "sourceLanguage": "en",
        "targetLanguage": "sw",
        "type": "nmt",
        "isBuilding": False,
        "modelRevision": 0,
        "confidence": 0.0,
        "corpusSize": 0,
        "dateCreated": engine["dateCreated"],
    }


def test_get_list_patch_delete(client: httpx.Client) -> None:
    engine = create_engine(client)
    url = f"/translation/engines/{engine['id']}"
    assert client.get(url).json() == engine
    assert [e["id"] for e in client.get("/translation/engines").json()] == [engine["id"]]

    patched = client.patch(url, json={"targetLanguage": "fr"})
    assert patched.status_code == 200
    assert patched.json()["targetLanguage"] == "fr"
    assert patched.json()["sourceLanguage"] == "en"

    assert client.delete(url).status_code == 200
    assert client.get(url).status_code == 404
    assert client.get("/translation/engines").json() == []


def test_another_owners_engine_is_forbidden(api: RunningApi, client: httpx.Client) -> None:
    """Serval's `CheckOwnerAsync` (TranslationEngineTests `GetByIdAsync` "Engine is not owned"):
    another owner's engine answers 403, a missing one 404; listings show only the caller's own."""
    engine = create_engine(client)
    with api.client(owner="owner-b") as other:
        for response in (
            other.get(f"/translation/engines/{engine['id']}"),
            other.delete(f"/translation/engines/{engine['id']}"),
            other.post(f"/translation/engines/{engine['id']}/translate", json="hello"),
        ):
            assert response.status_code == 403
            assert "belongs to another client" in response.json()["message"]
            assert "owner-a" not in response.text
        missing = other.get(f"/translation/engines/{'0' * 24}")
        assert missing.status_code == 404 and "not found" in missing.json()["message"]
        assert other.get("/translation/engines").json() == []
    assert client.get(f"/translation/engines/{engine['id']}").status_code == 200


def test_invalid_engine_type_and_language_answer_400(client: httpx.Client) -> None:
    bad_type = client.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "smt"}
    )
    assert bad_type.status_code == 400
    assert "engine type" in bad_type.json()["message"]

    bad_language = client.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "xx-!!", "type": "nmt"}
    )
    assert bad_language.status_code == 400
    assert "targetLanguage" in bad_language.json()["message"]

    missing = client.post("/translation/engines", json={"sourceLanguage": "en", "type": "nmt"})
    assert missing.status_code == 400
    assert "targetLanguage" in missing.json()["message"]


def test_word_alignment_engine_types_answer_405_here(client: httpx.Client) -> None:
    created = client.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "statistical"}
    )
    assert created.status_code == 405
    assert "statistical" in created.json()["message"]
    assert client.get("/translation/engine-types/Statistical/queues").status_code == 405
    assert client.get("/translation/engine-types/statistical/languages/en").status_code == 404, (
        "Serval's language info: no such translation engine type (test_serval_integration.py)"
    )
    assert client.get("/translation/engine-types/no-such-type/queues").status_code == 400


def test_translate_errors(client: httpx.Client) -> None:
    assert (
        client.post("/translation/engines/000000000000000000000000/translate", json="hi").status_code == 404
    )
    engine = create_engine(client)
    base = f"/translation/engines/{engine['id']}"

    unbuilt = client.post(f"{base}/translate", json="hello world")
    assert unbuilt.status_code == 409
    assert "not been built" in unbuilt.json()["message"]

    assert client.post(f"{base}/translate", json="   ").status_code == 400
    oversized = client.post(f"{base}/translate", json="a" * (MAX_SEGMENT_CHARS + 1))
    assert oversized.status_code == 413
    assert str(MAX_SEGMENT_CHARS) in oversized.json()["message"]
    assert client.post(f"{base}/translate", json={"not": "a string"}).status_code == 400
    assert client.post(f"{base}/get-word-graph", json="hello").status_code == 409


def test_echo_engine_translates_after_its_build(client: httpx.Client) -> None:
    engine = create_engine(client, engine_type="echo")
    base = f"/translation/engines/{engine['id']}"
    build = client.post(f"{base}/builds", json={})
    assert build.status_code == 201
    assert (build.json()["state"], build.json()["revision"]) == ("Pending", 1)
    assert wait_for_build(client, build.json())["state"] == "Completed"
    assert client.get(base).json()["modelRevision"] == 1

    result = client.post(f"{base}/translate", json="Hello, world!")
    assert result.status_code == 200
    assert result.json() == {
        "translation": "Hello, world!",
        "sourceTokens": ["Hello", ",", "world", "!"],
        "targetTokens": ["Hello", ",", "world", "!"],
        "confidences": [1.0, 1.0, 1.0, 1.0],
        "sources": [["Primary"]] * 4,
        "alignment": [{"sourceIndex": i, "targetIndex": i} for i in range(4)],
        "phrases": [{"sourceSegmentStart": 0, "sourceSegmentEnd": 4, "targetSegmentCut": 4}],
    }
    n_best = client.post(f"{base}/translate/3", json="Hello")
    assert n_best.status_code == 200
    assert len(n_best.json()) == 3
    assert client.post(f"{base}/translate/0", json="Hello").status_code == 400


def test_language_info_and_queue(client: httpx.Client) -> None:
    info = client.get("/translation/engine-types/nmt/languages/sw").json()
    assert info == {"engineType": "nmt", "isNative": True, "internalCode": "swh_Latn"}
    assert client.get("/translation/engine-types/nmt/queues").json() == {"size": 0, "engineType": "nmt"}
