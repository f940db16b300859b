"""LibreTranslate's HTTP API: its own Python clients (`libretranslatepy`, `deep-translator`), run
unchanged against an in-process API service and a real node process, and every way LibreTranslate
tools send a request (JSON, form and query-string fields, `q` lists, alternatives, `auto`, HTML),
with keys bound to an engine or not; and every kind of bad input answered with LibreTranslate's
`{"error"}` and a 4xx, never a 5xx."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException
from libretranslatepy import LibreTranslateAPI

from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, CREATE_ENGINES, READ_ENGINES, Caller
from serval_api.rest.libretranslate_protocol import FILES_DISABLED, INVALID_KEY, KEY_REQUIRED
from serval_api.service import Services, text_translation
from serval_api.service.keys import create_node_token
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi
from tests.e2e.nodes import Node, built_engines, translate
from tests.helpers import verse_pairs

pytestmark = pytest.mark.sqlite_pass_only


def services_of(api: RunningApi) -> Services:
    assert api.service.services is not None
    return api.service.services


@pytest.fixture
def node(api: RunningApi, store: ModelStore, tmp_path: Path) -> Iterator[Node]:
    _, token = api.run(create_node_token(services_of(api).db, "libre"))
    started = Node(api, tmp_path, token, "libre-node")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def libre(api: RunningApi) -> Iterator[httpx.Client]:
    """A client of the service's root, where LibreTranslate's routes are."""
    with httpx.Client(base_url=api.rest_url, timeout=60) as client:
        yield client


def core(api: RunningApi, key_owner: Caller, source: str, target: str, text: str) -> str:
    """What the shared core answers for the same text: the LibreTranslate routes add nothing to it."""
    answer = api.run(text_translation.translate_text(services_of(api), key_owner, source, target, text))
    return answer.translation


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_libretranslate_clients_and_requests_against_a_real_node(
    api: RunningApi, store: ModelStore, node: Node, libre: httpx.Client
) -> None:
    key = api.api_key("owner-a")
    unbound = Caller("owner-a", frozenset(ALL_ENGINE_SCOPES))
    english, swahili = verse_pairs("engwebp", "swh1850", 3)
    url = api.rest_url + "/"

    # libretranslatepy: form bodies, a GET /languages with a body.
    client = LibreTranslateAPI(url, key)
    assert client.translate(english[0], "en", "sw") == core(api, unbound, "eng_Latn", "swh_Latn", english[0])
    detected = client.detect(swahili[0])
    assert detected[0]["language"] == "sw" and 50 < detected[0]["confidence"] <= 100
    assert len(detected) <= 3 and detected == sorted(detected, key=lambda d: -d["confidence"])
    languages = {entry["code"]: entry for entry in client.languages()}
    assert len(languages) >= 200 and languages["en"]["name"] == "English"
    assert {"sw", "es", "ha", "zh", "zt"} <= set(languages["en"]["targets"]) and "en" not in languages["en"][
        "targets"
    ]
    assert languages["zt"]["name"] == "Chinese (Traditional)"
    with pytest.raises(urllib.error.HTTPError) as refused:
        LibreTranslateAPI(url, "serval_not-a-key").translate(english[0], "en", "sw")
    assert refused.value.code == 403 and json.loads(refused.value.read()) == {"error": INVALID_KEY}

    # deep-translator: every field in the query string, no body; its own list of 17 languages.
    spanish = [core(api, unbound, "eng_Latn", "spa_Latn", text) for text in english[:2]]
    translator = LibreTranslator(source="en", target="es", api_key=key, custom_url=url)
    assert translator.translate(english[0]) == spanish[0]
    assert translator.translate_batch(english[:2]) == spanish
    with pytest.raises(AuthorizationException):
        LibreTranslator(source="en", target="es", api_key="serval_wrong", custom_url=url).translate("Hi")

    # The same request as JSON, as a form and as a query string; q as a list keeps its order.
    fields = {"q": english[1], "source": "en", "target": "sw", "api_key": key}
    expected = core(api, unbound, "eng_Latn", "swh_Latn", english[1])
    assert ok(libre.post("/translate", json=fields)) == {"translatedText": expected}
    assert ok(libre.post("/translate", data=fields)) == {"translatedText": expected}
    assert ok(libre.post("/translate", params=fields)) == {"translatedText": expected}
    assert ok(libre.post("/translate", json={**fields, "source": "eng_Latn", "target": "sw-KE"})) == {
        "translatedText": expected
    }, "BCP-47 tags and NLLB codes are read too"
    listed = ok(libre.post("/translate", json={**fields, "q": [english[2], "", english[1]]}))
    assert listed == {
        "translatedText": [core(api, unbound, "eng_Latn", "swh_Latn", english[2]), "", expected]
    }

    # Alternatives: whole-text n-best from the core, a list per text for a list.
    one = ok(libre.post("/translate", json={**fields, "alternatives": 2}))
    assert one["translatedText"] == expected and isinstance(one["alternatives"], list)
    assert 1 <= len(one["alternatives"]) <= 2 and expected not in one["alternatives"]
    many = ok(libre.post("/translate", data={**fields, "q": english[1], "alternatives": "1"}))
    assert len(many["alternatives"]) == 1
    batch = ok(libre.post("/translate", json={**fields, "q": [english[1], english[2]], "alternatives": 1}))
    assert [len(a) for a in batch["alternatives"]] == [1, 1]

    # source auto: detectedLanguage only then; a text already in the target language comes back as it is.
    auto = ok(libre.post("/translate", json={**fields, "source": "auto"}))
    assert auto["translatedText"] == expected
    assert auto["detectedLanguage"]["language"] == "en" and auto["detectedLanguage"]["confidence"] > 50
    mixed = ok(libre.post("/translate", json={**fields, "q": [english[1], swahili[0]], "source": "auto"}))
    assert mixed["translatedText"] == [expected, swahili[0]]
    assert [d["language"] for d in mixed["detectedLanguage"]] == ["en", "sw"]
    assert "detectedLanguage" not in ok(libre.post("/translate", json=fields))

    # HTML: the text nodes translated, tags, attributes and entities kept.
    markup = (
        '<p class="verse" title="In the beginning">In the beginning <b>was the <i>Word</i></b> '
        "&amp; the Word was with God.</p><code>God</code><!-- In the beginning -->"
    )
    html = ok(libre.post("/translate", json={**fields, "q": markup, "format": "html"}))["translatedText"]
    texts = ["In the beginning ", "was the ", "Word", " & the Word was with God."]
    parts = [core(api, unbound, "eng_Latn", "swh_Latn", t).replace("&", "&amp;") for t in texts]
    assert html == (
        f'<p class="verse" title="In the beginning">{parts[0]}<b>{parts[1]}<i>{parts[2]}</i></b>'
        f"{parts[3]}</p><code>God</code><!-- In the beginning -->"
    )
    detected_html = ok(
        libre.post("/translate", json={**fields, "q": markup, "format": "html", "source": "auto"})
    )
    assert detected_html["translatedText"] == html and detected_html["detectedLanguage"]["language"] == "en"

    # A key bound to an engine: its pair only, translated by its revision.
    [(owner, engine)] = built_engines(api, store, 1, owners=("owner-a",))
    with api.client("ops", (ADMIN,)) as admin:
        created = admin.post(
            "/admin/api-keys",
            json={"owner": "owner-a", "scopes": [READ_ENGINES], "engineId": engine["id"]},
        )
    assert created.status_code == 201, created.text
    bound = created.json()["key"]
    assert ok(libre.get("/languages", params={"api_key": bound})) == [
        {"code": "en", "name": "English", "targets": ["sw"]},
        {"code": "sw", "name": "Swahili", "targets": []},
    ]
    own = ok(libre.post("/translate", json={**fields, "q": english[0], "api_key": bound}))
    assert own["translatedText"] == translate(owner, engine["id"], english[0]).json()["translation"]
    refused_pair = libre.post("/translate", json={**fields, "target": "fr", "api_key": bound})
    assert refused_pair.status_code == 400 and refused_pair.json() == {
        "error": "fr is not supported; translate into Swahili (sw)"
    }
    wrong_way = libre.post("/translate", json={**fields, "source": "sw", "target": "en", "api_key": bound})
    assert wrong_way.status_code == 400 and wrong_way.json() == {
        "error": "sw is not supported; translate from English (en)"
    }
    bound_auto = ok(libre.post("/translate", json={**fields, "source": "auto", "api_key": bound}))
    assert bound_auto["detectedLanguage"]["language"] == "en"
    assert ok(libre.post("/detect", data={"q": swahili[0], "api_key": bound}))[0]["language"] == "en", (
        "a bound key detects among the languages it translates from"
    )
    assert node.loads() == 1, "the engine's inference-only revision shares the public base model's weights"


def test_settings_health_and_files(api: RunningApi, libre: httpx.Client) -> None:
    settings = ok(libre.get("/frontend/settings"))
    assert settings["charLimit"] == services_of(api).settings.api.max_text_chars
    assert settings["keyRequired"] is True and settings["filesTranslation"] is False
    assert settings["language"]["source"]["code"] == "auto"
    assert ok(libre.get("/health")) == {"status": "ok"}
    files = libre.post("/translate_file", files={"file": ("a.txt", b"hello")}, data={"source": "en"})
    assert files.status_code == 403 and files.json() == {"error": FILES_DISABLED}
    # A web page or extension on another origin may call: LibreTranslate's CORS headers, and preflights.
    preflight = libre.options(
        "/translate",
        headers={"Origin": "https://example.org", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == "*"
    assert "content-type" in preflight.headers["access-control-allow-headers"].lower()
    refused = libre.post("/translate", json={"q": "Hi"}, headers={"Origin": "https://example.org"})
    assert refused.status_code == 400 and refused.headers["access-control-allow-origin"] == "*"


def test_bad_input_answers_libretranslate_errors_and_never_5xx(
    api: RunningApi, store: ModelStore, libre: httpx.Client
) -> None:
    """No node runs: every request here is refused before a translation would be asked for."""
    key = api.api_key("owner-a")
    good = {"q": "Hello", "source": "en", "target": "sw", "api_key": key}
    limit = services_of(api).settings.api.max_text_chars

    def refused(status: int, message: str | None = None, **request: Any) -> None:
        response = libre.request(request.pop("method", "POST"), request.pop("path", "/translate"), **request)
        assert response.status_code == status, response.text
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"], str)
        if message is not None:
            assert body["error"] == message, body

    refused(400, KEY_REQUIRED, json={**good, "api_key": None})
    refused(400, KEY_REQUIRED, params={k: v for k, v in good.items() if k != "api_key"})
    refused(403, INVALID_KEY, json={**good, "api_key": "serval_wrong"})
    refused(403, INVALID_KEY, json={**good, "api_key": 12})
    refused(403, INVALID_KEY, data={**good, "api_key": "x" * 5000})
    refused(403, None, json={**good, "api_key": api.api_key("owner-a", (CREATE_ENGINES,))})
    refused(
        400, "Invalid JSON format", content=b'{"q": "Hello",', headers={"Content-Type": "application/json"}
    )
    refused(400, "Invalid JSON format", content=b"[1, 2]", headers={"Content-Type": "application/json"})
    refused(400, "Invalid JSON format", content=b"\xff\xfe", headers={"Content-Type": "application/json"})
    refused(400, "Invalid JSON format", content=b"[" * 100_000, headers={"Content-Type": "application/json"})
    for q in (None, "", []):
        refused(400, "Invalid request: missing q parameter", json={**good, "q": q})
    for q in (5, [1, 2], {"a": 1}, [["nested"]], True):
        refused(400, "Invalid request: q must be a string or a list of strings", json={**good, "q": q})
    refused(400, "Invalid request: missing source parameter", json={**good, "source": ""})
    refused(400, "Invalid request: missing target parameter", data={**good, "target": ""})
    refused(400, "Invalid request: source parameter must be a string", json={**good, "source": ["en"]})
    for code in ("xx", "klingon", "../../etc/passwd", "q" * 1000, "en\x00", "und", "auto"):
        refused(400, None, json={**good, "target": code})
    refused(
        400,
        "xx is not supported; translate from one of the 202 languages /languages lists",
        json={**good, "source": "xx"},
    )
    refused(
        400,
        "English (en) is not available as a target language from English (en)",
        json={**good, "target": "en"},
    )
    refused(400, "pdf format is not supported", json={**good, "format": "pdf"})
    for alternatives in ("abc", 1.5, True, [1], "1e3", "9" * 5000):
        refused(
            400,
            "Invalid request: alternatives parameter must be a number",
            json={**good, "alternatives": alternatives},
        )
    for alternatives in (-1, 999):
        refused(400, None, json={**good, "alternatives": alternatives})
    refused(
        400,
        f"Invalid request: request ({limit + 1}) exceeds text limit ({limit})",
        json={**good, "q": "a" * (limit + 1)},
    )
    refused(400, None, json={**good, "q": ["a" * limit, "b"]})
    refused(400, None, params={**good, "q": "ä" * (limit + 1)})
    refused(413, None, json={**good, "q": "a" * (2 << 20)})
    refused(405, None, method="GET", params=good)
    refused(400, None, content=b"--x\r\nbroken", headers={"Content-Type": "multipart/form-data; boundary=x"})
    refused(400, "Invalid request: missing q parameter", path="/detect", data={"api_key": key})
    refused(403, INVALID_KEY, path="/detect", data={"q": "Hello", "api_key": "nope"})
    refused(403, INVALID_KEY, method="GET", path="/languages", params={"api_key": "nope"})

    # No node serves: 503 in LibreTranslate's shape, with Retry-After (not a 5xx for bad input: a retry).
    services_of(api).settings.api.text_load_wait_s = 0.0
    busy = libre.post("/translate", json=good)
    assert busy.status_code == 503 and set(busy.json()) == {"error"} and int(busy.headers["retry-after"]) >= 1

    # Blank text needs no model: it comes back as it is.
    assert ok(libre.post("/translate", json={**good, "q": " \n "})) == {"translatedText": " \n "}
    # Without a key /languages lists the public base model's languages; with it off, none, and an
    # unbound key is told to use a key bound to an engine.
    assert len(ok(libre.get("/languages"))) >= 200
    services_of(api).settings.api.public_base_model_enabled = False
    assert ok(libre.get("/languages")) == []
    refused(400, "This service translates only with engines: use an API key bound to an engine.", json=good)
