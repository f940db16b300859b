"""SIL Converters' NLLB Translator, as its code sends requests and reads answers
(`../shared/docs/sil-converters.md`), against an in-process API service and a real node process:
the languages, a key bound to an engine (its train-segment overlay too), an unbound key on the
public base model, two pairs, paragraphs in five scripts, a cold model, and every error a
translator can meet, each read as the converter reads it: the body of a non-2xx answer *is* the
translation the translator sees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from serval_api.auth import ADMIN, ALL_ENGINE_SCOPES, READ_ENGINES
from serval_api.rest import sil_converters
from serval_api.service import Services, text_translation
from serval_api.service.keys import create_node_token
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi
from tests.e2e.nodes import Node, built_engines, translate

pytestmark = pytest.mark.sqlite_pass_only

ENGLISH = "eng_Latn"
SWAHILI = "swh_Latn"
FRENCH = "fra_Latn"
PARAGRAPHS = [
    # (source, target, sentences, what joins them): translated whole, then one sentence at a time
    (
        ENGLISH,
        SWAHILI,
        ["In the beginning was the Word.", "And the Word was with God!", "Who is he?"],
        ["  ", "\n"],
    ),
    ("hin_Deva", ENGLISH, ["यह एक वाक्य है।", "यह दूसरा है।"], [" "]),
    ("arb_Arab", ENGLISH, ["هل أنت بخير؟", "نعم أنا بخير."], [" "]),
    ("amh_Ethi", ENGLISH, ["ይህ አረፍተ ነገር ነው።", "ሁለተኛ ነው።"], [" "]),
    ("zho_Hans", ENGLISH, ["这是一个句子。", "这是第二个。"], [""]),
]


@dataclass(frozen=True)
class Shown:
    """One answer as the converter takes it: `text` is what the translator sees."""

    status: int
    text: str
    headers: httpx.Headers


class SilConverters:
    """The NLLB Translator converter's HTTP calls: `new Uri(endpoint, "/api/v1/translate/")`, the
    `SIL-NLLB-Auth-Key` scheme, Newtonsoft's camelCase JSON in UTF-8; 2xx bodies read as
    `JArray.Parse("[" + body + "]")[0]["translatedText"]` (translate) or `string[]` (languages),
    any other body returned as the translation."""

    def __init__(self, endpoint: str, key: str | None) -> None:
        self.endpoint = endpoint
        self.key = key
        self.http = httpx.Client(base_url=endpoint, timeout=60, follow_redirects=False)
        self.http.headers = httpx.Headers({"User-Agent": "EncConverters NllbTranslator"})

    def close(self) -> None:
        self.http.close()

    def _authorization(self) -> dict[str, str]:
        return {"Authorization": f"SIL-NLLB-Auth-Key {self.key}"} if self.key is not None else {}

    def languages(self, path: str = sil_converters.LANGUAGES_PATH) -> list[str] | Shown:
        answer = self.http.get(path, headers={"Accept": "application/json", **self._authorization()})
        if not answer.is_success:
            return Shown(answer.status_code, answer.text, answer.headers)
        codes = json.loads(answer.text)
        assert isinstance(codes, list) and all(isinstance(code, str) for code in codes), answer.text
        return codes

    def translate(self, source: str, target: str, text: str) -> Shown:
        body = {"sourceLanguage": source, "targetLanguage": target, "text": text}
        return self.post(newtonsoft(body))

    def post(
        self,
        body: bytes,
        content_type: str = "application/json; charset=utf-8",
        path: str = sil_converters.TRANSLATE_PATH,
    ) -> Shown:
        answer = self.http.post(
            path, content=body, headers={"Content-Type": content_type, **self._authorization()}
        )
        assert not answer.is_redirect, "the converter's paths answer without a redirect"
        if answer.is_success:
            translated = json.loads("[" + answer.text + "]")[0]["translatedText"]
            assert isinstance(translated, str)
            return Shown(answer.status_code, translated, answer.headers)
        return Shown(answer.status_code, answer.text, answer.headers)


def newtonsoft(value: object) -> bytes:
    """JSON as `JsonConvert.SerializeObject` writes it: no spaces, non-ASCII text as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def error_of(shown: Shown, status: int) -> str:
    """The sentence of an error answer, checked to be one a translator can read in their document."""
    assert shown.status == status, (shown.status, shown.text)
    assert shown.headers["content-type"] == "application/json"
    body = json.loads(shown.text)
    assert isinstance(body, dict) and list(body) == ["error"], shown.text
    sentence: str = body["error"]
    assert sentence == "Unauthorized" or sentence.endswith("."), sentence
    assert len(sentence) < 200 and "\n" not in sentence
    for leak in ("://", "error id", "Traceback", "Exception", "/api/", "serval_"):
        assert leak not in sentence, sentence
    return sentence


def services_of(api: RunningApi) -> Services:
    assert api.service.services is not None
    return api.service.services


@pytest.fixture
def unbound(api: RunningApi) -> Iterator[SilConverters]:
    client = SilConverters(api.rest_url, api.api_key("owner-a", ALL_ENGINE_SCOPES))
    try:
        yield client
    finally:
        client.close()


def test_every_error_reaches_the_translator_as_one_sentence(
    api: RunningApi, store: ModelStore, unbound: SilConverters
) -> None:
    """No node runs: everything here is answered before any translation is asked of one."""
    services = services_of(api)
    services.settings.api.text_load_wait_s = 0.0

    languages = unbound.languages()
    assert isinstance(languages, list) and {ENGLISH, SWAHILI, "hin_Deva"} <= set(languages)
    assert len(languages) >= 200
    assert unbound.languages(sil_converters.LANGUAGES_PATH.rstrip("/")) == languages, "no redirect"
    with httpx.Client(base_url=api.rest_url, headers={"X-API-Key": unbound.key or ""}) as ours:
        assert ours.get(sil_converters.LANGUAGES_PATH).json() == languages, "X-API-Key works too"

    for key in (None, "serval_not-a-key", "a;b"):
        stranger = SilConverters(api.rest_url, key)
        for shown in (stranger.languages(), stranger.translate(ENGLISH, SWAHILI, "Hello.")):
            assert isinstance(shown, Shown)
            assert error_of(shown, 401) == "Unauthorized" and shown.text == '{"error":"Unauthorized"}'
        stranger.close()
    unscoped = SilConverters(api.rest_url, api.api_key("owner-a", ("read:files",)))
    assert "Unauthorized" in error_of(unscoped.translate(ENGLISH, SWAHILI, "Hello."), 403)
    unscoped.close()

    refused = [
        ((ENGLISH, "xyz_Latn", "Hello."), "'xyz_Latn' is not a language this service translates"),
        (("english", SWAHILI, "Hello."), "'english' is not a language"),
        ((ENGLISH, SWAHILI, ""), "There is no text to translate."),
        ((ENGLISH, SWAHILI, " \n "), "There is no text to translate."),
        ((ENGLISH, ENGLISH, "Hello."), "The source and target languages are the same"),
        ((ENGLISH, SWAHILI, "a" * 5001), "longer than 5000 characters"),
        ((ENGLISH, SWAHILI, "nul\x00"), sil_converters.HAS_NUL),
    ]
    for (source, target, text), message in refused:
        assert message in error_of(unbound.translate(source, target, text), 400)

    raw = [
        (b'{"sourceLanguage":"eng_Latn","targetLanguage":', "application/json; charset=utf-8", 400),
        (b"", "application/json; charset=utf-8", 400),
        (b'["eng_Latn","swh_Latn","Hello."]', "application/json; charset=utf-8", 400),
        (b'{"sourceLanguage":"eng_Latn","targetLanguage":"swh_Latn","text":7}', "application/json", 400),
        (b'{"sourceLanguage":"eng_Latn","targetLanguage":"swh_Latn"}', "application/json", 400),
        ('{"text":"caf\u00e9"}'.encode("latin-1"), "application/json; charset=utf-8", 400),
        (
            b'{"sourceLanguage":"eng_Latn","targetLanguage":"swh_Latn","text":"\\ud800"}',
            "application/json",
            400,
        ),
        (b"[" * 100_000, "application/json", 400),
        (b"sourceLanguage=eng_Latn&text=Hello", "application/x-www-form-urlencoded", 415),
        (b"Hello.", "text/plain; charset=utf-8", 415),
        (b"x" * (2 << 20), "application/json; charset=utf-8", 413),
    ]
    for body, content_type, status in raw:
        error_of(unbound.post(body, content_type), status)
    assert "not valid JSON" in error_of(unbound.post(b"{", "application/json"), 400)
    assert "UTF-8" in error_of(unbound.post(b'{"text":"\xff"}', "application/json"), 400)
    for method, path, status in [
        ("GET", sil_converters.TRANSLATE_PATH, 405),
        ("POST", sil_converters.LANGUAGES_PATH, 405),
        ("GET", sil_converters.TRANSLATE_PATH + "nothing/", 404),
    ]:
        other = unbound.http.request(method, path)
        error_of(Shown(other.status_code, other.text, other.headers), status)

    with_names_cased_otherwise = b'{"SourceLanguage":"eng_Latn","TargetLanguage":"eng_Latn","Text":"Hi."}'
    assert "the same" in error_of(unbound.post(with_names_cased_otherwise), 400), (
        "names read case-insensitively"
    )

    busy = unbound.translate(ENGLISH, SWAHILI, "Hello.")
    assert error_of(busy, 503) == text_translation.BUSY_MESSAGE and busy.headers["retry-after"]

    services.settings.api.public_base_model_enabled = False
    assert "use an API key bound to an engine" in error_of(unbound.translate(ENGLISH, SWAHILI, "Hi."), 400)
    off = unbound.languages()
    assert isinstance(off, Shown) and "bound to an engine" in error_of(off, 400)


@pytest.fixture
def node(api: RunningApi, store: ModelStore, tmp_path: Path) -> Iterator[Node]:
    _, token = api.run(create_node_token(services_of(api).db, "sil"))
    started = Node(api, tmp_path, token, "sil-node")
    try:
        yield started
    finally:
        started.stop()


def test_the_converter_translates_with_the_public_base_model_and_a_bound_engine(
    api: RunningApi, store: ModelStore, node: Node, unbound: SilConverters
) -> None:
    services = services_of(api)
    services.settings.api.text_load_wait_s = 0.0
    cold = unbound.translate(ENGLISH, SWAHILI, "In the beginning.")
    assert error_of(cold, 503) == text_translation.LOADING_MESSAGE and int(cold.headers["retry-after"]) >= 1
    services.settings.api.text_load_wait_s = 60.0  # the load went on: the next request finds it

    sources = ["In the beginning God created the heavens and the earth.", "Jesus wept."]
    assert all(len(text_translation.split_sentences(s, ENGLISH)) == 1 for s in sources), "one sentence each"
    swahili = unbound.translate(ENGLISH, SWAHILI, sources[0])
    french = unbound.translate(ENGLISH, FRENCH, sources[0])
    assert swahili.status == french.status == 200 and swahili.text and swahili.text != french.text
    slashless = unbound.post(
        newtonsoft({"sourceLanguage": ENGLISH, "targetLanguage": SWAHILI, "text": sources[0]}),
        path=sil_converters.TRANSLATE_PATH.rstrip("/"),
    )
    assert slashless.status == 200 and slashless.text == swahili.text

    for source, target, sentences, joins in PARAGRAPHS:
        # the converter's default: one sentence a call; with splitting off: the paragraph at once
        alone = [unbound.translate(source, target, sentence) for sentence in sentences]
        assert all(shown.status == 200 and shown.text.strip() for shown in alone), alone
        paragraph = _joined(sentences, joins)
        whole = unbound.translate(source, target, paragraph)
        assert whole.status == 200, whole.text
        assert whole.text == _joined([shown.text for shown in alone], joins), (source, paragraph)

    [(client, engine)] = built_engines(api, store, 1, owners=("owner-a",))
    with api.client("ops", (ADMIN,)) as admin:
        created = admin.post(
            "/admin/api-keys", json={"owner": "owner-a", "scopes": [READ_ENGINES], "engineId": engine["id"]}
        )
    assert created.status_code == 201, created.text
    bound = SilConverters(api.rest_url, created.json()["key"])
    try:
        assert bound.languages() == [ENGLISH, SWAHILI]
        own = bound.translate(ENGLISH, SWAHILI, sources[1])
        assert own.text == translate(client, engine["id"], sources[1]).json()["translation"]
        stored = client.post(
            f"/translation/engines/{engine['id']}/train-segment",
            json={"sourceSegment": sources[0], "targetSegment": "Hapo mwanzo.", "sentenceStart": True},
        )
        assert stored.status_code == 200, stored.text
        paragraph = bound.translate(ENGLISH, SWAHILI, f"{sources[0]}\n{sources[1]}")
        assert paragraph.text == f"Hapo mwanzo.\n{own.text}", "the engine's human translations answer first"
        run_on = "word " * 420  # one sentence, over the engine's api.max_segment_chars but not max_text_chars
        assert error_of(bound.translate(ENGLISH, SWAHILI, run_on), 400) == text_translation.TOO_LONG_MESSAGE
        other_pair = error_of(bound.translate(ENGLISH, FRENCH, sources[1]), 400)
        assert other_pair == "This key translates eng_Latn to swh_Latn only; choose those languages."
    finally:
        bound.close()
    assert node.loads() == 1, "the base model, loaded once, answers both keys"


def _joined(sentences: list[str], joins: list[str]) -> str:
    return sentences[0] + "".join(
        join + sentence for join, sentence in zip(joins, sentences[1:], strict=True)
    )
