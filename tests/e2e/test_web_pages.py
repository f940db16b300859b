"""The two web pages in a real browser: Debian's chromium, driven by Playwright, loads `/` and
`/admin` from an in-process API service with a real node process serving the tiny base model, and
types, clicks and reads what a person would see (docs/web-pages.md).

Chromium comes from Debian (`scripts/system-packages.sh` installs it), never from Playwright's own
download. Without it the tests are skipped on a developer's machine and fail under CI (`CI=true`).
Every wait is bounded (Playwright's `expect` with `WAIT_MS`); nothing is timed.

One API service and one node (with one engine built and loaded) serve the whole module; the test
of an unreachable service stops an API service of its own.

`SERVAL_TEST_SCREENSHOTS=1` writes the screenshots into docs/images/ (otherwise into the test's
temporary folder): `SERVAL_TEST_SCREENSHOTS=1 pytest tests/e2e/test_web_pages.py`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, ViewportSize, expect

from serval_api.auth import ADMIN, READ_ENGINES
from serval_api.service.keys import create_node_token
from serval_common.manifest import Manifest, publish_folder
from serval_common.settings import ApiSettings, Settings
from serval_common.store import open_store
from tests.api.conftest import RunningApi, create_engine, report_fault, report_training, start_build
from tests.e2e.browser import Watched
from tests.e2e.conftest import BASE_MODEL
from tests.e2e.nodes import Node, admin_nodes, built_engines, inference_only_build, smt_engine, translate
from tests.helpers import fresh_database, publish_tiny_base_model, wait_until

pytestmark = [
    pytest.mark.sqlite_pass_only,  # the admin routes' database work: tests/api/test_admin_console.py
    pytest.mark.timeout(240),  # each test, the module's API service and node included for the first
]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "images"
LAPTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 375, "height": 740}
SEGMENT = "In the beginning was the Word, and the Word was with God."
N_BEST = 4


@dataclass
class Site:
    """The module's API service, its node, and an engine built and loaded on it."""

    api: RunningApi
    node: Node
    client: httpx.Client
    """The engine owner's client (`translator`)."""
    engine: dict[str, Any]


def api_settings(home: Path, database_url: str) -> Settings:
    return Settings(
        home=home,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, heartbeat_interval_s=0.5),
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, tiny_ct2_model: Path) -> Iterator[Site]:
    home = tmp_path_factory.mktemp("web")
    with fresh_database(home) as database_url:
        api = RunningApi(api_settings(home, database_url))
        try:
            store = open_store((home / "store").resolve().as_uri())
            publish_tiny_base_model(store, tiny_ct2_model, BASE_MODEL)
            assert api.service.services is not None
            _, token = api.run(create_node_token(api.service.services.db, "web"))
            node = Node(api, home, token, "web-node")
            try:
                [(client, engine)] = built_engines(api, store, 1, owners=("translator",))
                try:
                    yield Site(api, node, client, engine)
                finally:
                    client.close()
            finally:
                node.stop()
        finally:
            api.close()


def screenshot(page: Page, name: str, tmp_path: Path) -> Path:
    folder = SCREENSHOTS if os.environ.get("SERVAL_TEST_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    return path


# ---- the playground ------------------------------------------------------------------------------


def completion(client: httpx.Client, engine_id: str, segment: str, prefix: str) -> tuple[str, str]:
    """The engine's completion of `prefix`, as a client reads it, and the part after what was typed
    (the page shows that part as the suggestion)."""
    answer = client.post(
        f"/translation/engines/{engine_id}/translate-prefix",
        json={"segment": segment, "prefix": prefix, "n": 1},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    completed: str = answer.json()[0]["translation"]
    # The engine may join the typed words to the rest its own way ("Basi " and ", …" is "Basi, …").
    assert completed.startswith(prefix.rstrip())
    if completed.startswith(prefix):
        return completed, completed[len(prefix) :]
    return completed, completed[len(prefix.rstrip()) :].lstrip()


def test_playground_translates_shows_alternatives_confidence_alignment_and_completes_a_prefix(
    site: Site, tmp_path: Path, watched: Watched
) -> None:
    api, client, engine = site.api, site.client, site.engine
    # What the engine answers, as a client reads it: the page must show the same.
    expected = client.post(
        f"/translation/engines/{engine['id']}/translate/{N_BEST}", json=SEGMENT, timeout=60
    )
    assert expected.status_code == 200, expected.text
    results: list[dict[str, Any]] = expected.json()
    best = results[0]
    aligned = sorted({pair["targetIndex"] for pair in best["alignment"]})
    assert aligned, "the tiny model aligns its words"
    key = api.api_key("translator", (READ_ENGINES,))
    page = watched.page

    answer = page.goto(api.rest_url + "/")
    assert answer is not None and answer.status == 200
    assert "default-src 'self'" in answer.headers["content-security-policy"]
    page.fill("#key", key)
    page.click("#use-key")
    expect(page.locator(f"#model option[value='{engine['id']}']")).to_be_attached()
    # Every language the service says the key translates, as LibreTranslate's /languages lists them.
    served = httpx.get(api.rest_url + "/languages", headers={"X-API-Key": key}, timeout=30).json()
    assert served, "the base model's languages"
    expect(page.locator("#languages option")).to_have_count(len(served))
    expect(page.locator(f"#languages option[value^='{served[0]['name']} (']")).to_be_attached()
    expect(page.locator("#source")).to_have_value("English (eng_Latn)")
    expect(page.locator("#target")).to_have_value("Swahili (swh_Latn)")

    # The public base model through LibreTranslate's /translate: a translation and alternatives.
    page.fill("#text", SEGMENT)
    page.click("#translate")
    expect(page.locator("#status")).to_contain_text("Translated in")
    expect(page.locator("#translation")).not_to_be_empty()
    expect(page.locator("#no-words")).to_be_visible()
    assert page.locator("#alternatives li").count() >= 1
    expect(page.locator("#sample-request")).to_contain_text(f"{api.rest_url}/translate")
    expect(page.locator("#sample-request")).to_contain_text("X-API-Key: $SERVAL_API_KEY")
    expect(page.locator("#sample-response")).to_contain_text("HTTP/1.1 200")
    expect(page.locator("#sample-response")).to_contain_text("translatedText")
    assert key not in page.locator("#sample-request").inner_text()

    page.click("#swap")  # the translation becomes the text (test_playground_for_a_translators_morning…)
    expect(page.locator("#source")).to_have_value("Swahili (swh_Latn)")
    expect(page.locator("#target")).to_have_value("English (eng_Latn)")
    page.click("#swap")
    page.fill("#text", SEGMENT)

    # The engine through its own API: n-best, per-word confidence, alignment on hover.
    page.select_option("#model", engine["id"])
    expect(page.locator("#source")).to_be_disabled()
    expect(page.locator("#source")).to_have_value("English (eng_Latn)")
    page.click("#translate")
    expect(page.locator("#revision")).to_have_text(f"revision {engine['modelRevision'] or 1}")
    words = page.locator("#translation .word")
    expect(words).to_have_count(len(best["targetTokens"]))
    assert words.all_inner_texts() == best["targetTokens"]
    shown = [float(w.get_attribute("data-confidence") or "nan") for w in words.all()]
    assert shown == pytest.approx(best["confidences"], abs=1e-3)
    assert all(re.search(r"\bconf-[0-4]\b", w.get_attribute("class") or "") for w in words.all())
    expect(page.locator("#alternatives li")).to_have_count(max(1, len(results) - 1))
    if len(results) > 1:
        expect(page.locator("#alternatives li").first).to_contain_text(results[1]["translation"])
    expect(page.locator("#sample-request")).to_contain_text(f"/translate/{N_BEST}")

    target_index = aligned[0]
    sources = sorted({p["sourceIndex"] for p in best["alignment"] if p["targetIndex"] == target_index})
    words.nth(target_index).hover()
    linked = page.locator("#source-words .word.linked")
    expect(linked).to_have_count(len(sources))
    assert [int(i) for i in linked.evaluate_all("els => els.map(e => e.dataset.index)")] == sources
    playground = screenshot(page, "playground.png", tmp_path)
    page.mouse.move(0, 0)
    expect(linked).to_have_count(0)

    # Interactive translation: a typed prefix is completed by the engine; Tab accepts.
    expect(page.locator("#interactive")).to_be_visible()
    prefix = best["targetTokens"][0] + " "
    page.locator("#prefix").press_sequentially(prefix)
    expect(page.locator("#completion .typed")).to_have_text(prefix)
    expect(page.locator("#sample-request")).to_contain_text("translate-prefix")
    completed, rest = completion(client, engine["id"], SEGMENT, prefix)
    expect(page.locator("#completion .suggested")).to_have_text(rest)
    page.locator("#prefix").press("Tab")
    expect(page.locator("#prefix")).to_have_value(completed)

    # Right-to-left text is laid out right to left, by the browser's own reading of it.
    page.fill("#text", "في البدء كان الكلمة")
    assert page.eval_on_selector("#text", "el => el.matches(':dir(rtl)')")
    assert page.eval_on_selector("#translation", "el => el.getAttribute('dir')") == "auto"

    # The key is kept in the browser: a new visit starts with it.
    page.reload()
    expect(page.locator("#key")).to_have_value(key)
    expect(page.locator(f"#model option[value='{engine['id']}']")).to_be_attached()
    watched.assert_clean(key)
    assert playground.stat().st_size > 10_000


OFF_SCREEN = """() => [...document.querySelectorAll('body *')]
    .filter((e) => e.getClientRects().length && e.getBoundingClientRect().right > innerWidth + 0.5)
    .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""
"""Every element shown whose right edge lies beyond the viewport (a field that runs off the screen)."""


def test_playground_for_a_translators_morning_on_a_laptop_and_a_phone(
    site: Site, browser: Browser, tmp_path: Path
) -> None:
    """As a translator works in it: at 1280×800 the translation sits beside the text, within the
    screen; Ctrl+Enter translates; Copy puts it on the clipboard; ⇄ turns it round; an engine
    without a name reads as its type, pair and date; a text over the limit is refused in one
    sentence that says what to do, with no old translation left under it; the engine chosen is
    remembered. At 375×740 nothing runs off the screen, and "Translate as I type" translates."""
    api, engine = site.api, site.engine
    key = api.api_key("translator", (READ_ENGINES,))
    limit = httpx.get(api.rest_url + "/frontend/settings", timeout=30).json()["charLimit"]
    laptop = Watched(browser, LAPTOP, ["clipboard-read", "clipboard-write"])
    try:
        page = laptop.page
        page.goto(api.rest_url + "/")
        page.fill("#key", key)
        page.click("#use-key")
        # The engine has no name: its type, pair and creation date, the id only beside it.
        option = page.locator(f"#model option[value='{engine['id']}']")
        expect(option).to_have_text(re.compile(r"^NMT engine, English → Swahili, created \w+"))
        assert engine["id"] not in option.inner_text()
        assert engine["id"] in (option.get_attribute("title") or "")
        expect(page.locator("#count")).to_have_text(f"0 / {limit:,} characters")

        page.fill("#text", SEGMENT)
        expect(page.locator("#count")).to_have_text(f"{len(SEGMENT)} / {limit:,} characters")
        page.locator("#text").press("Control+Enter")
        translation = page.locator("#translation")
        expect(translation).not_to_be_empty()
        box = translation.bounding_box()
        assert box is not None and box["height"] > 0
        assert box["x"] + box["width"] <= LAPTOP["width"] and box["y"] + box["height"] <= LAPTOP["height"], (
            f"the translation is within the screen, beside the text: {box}"
        )
        source_box = page.locator("#text").bounding_box()
        assert source_box is not None and source_box["x"] + source_box["width"] <= box["x"], "side by side"
        translated = translation.inner_text()

        page.click("#copy")
        expect(page.locator("#copy")).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == translated

        # ⇄: the languages turn round and the translation becomes the text to translate back.
        page.click("#swap")
        expect(page.locator("#source")).to_have_value("Swahili (swh_Latn)")
        expect(page.locator("#target")).to_have_value("English (eng_Latn)")
        expect(page.locator("#text")).to_have_value(translated)
        expect(translation).to_be_empty()
        page.click("#swap")
        page.fill("#text", SEGMENT)
        page.click("#translate")
        expect(translation).to_have_text(translated)

        # Over the limit: the service's 400, in the translator's words, and the old result gone.
        too_long = "word " * (limit // 5 + 100)
        page.fill("#text", too_long)
        expect(page.locator("#count")).to_contain_text("too long")
        page.locator("#text").press("Control+Enter")
        expect(page.locator("#problem")).to_have_text(
            f"The text is too long: {len(too_long):,} characters, at most {limit:,}. "
            "Split it and translate each part."
        )
        expect(page.locator("#sample-response")).to_contain_text("HTTP 400")
        expect(translation).to_be_empty()
        expect(page.locator("#details")).to_be_hidden()
        expect(page.locator("#copy")).to_be_disabled()

        # A language the model does not know, said before anything is sent.
        page.fill("#text", SEGMENT)
        page.fill("#target", "Klingon")
        page.click("#translate")
        expect(page.locator("#problem")).to_have_text(
            "This model does not know “Klingon”: choose a language from the list."
        )

        # An engine's own limit (its API's 413), read from the refusal into the count.
        segment_limit = api.service.settings.api.max_segment_chars
        page.select_option("#model", engine["id"])
        page.fill("#text", "word " * (segment_limit // 5 + 20))
        page.locator("#text").press("Control+Enter")
        expect(page.locator("#problem")).to_have_text(
            f"The text is too long: {segment_limit + 100:,} characters, at most {segment_limit:,}. "
            "Split it and translate each part."
        )
        expect(page.locator("#count")).to_have_text(
            f"{segment_limit + 100:,} / {segment_limit:,} characters: too long, split it"
        )

        # The engine chosen is there again on the next visit.
        page.reload()
        expect(page.locator("#model")).to_have_value(engine["id"])
        laptop.assert_clean(key)
    finally:
        laptop.close()

    phone = Watched(browser, PHONE)
    try:
        page = phone.page
        page.goto(api.rest_url + "/")
        page.fill("#key", key)
        page.click("#use-key")
        expect(page.locator("#status")).to_contain_text("languages")
        page.check("#auto")
        page.locator("#text").press_sequentially("In the beginning")
        expect(page.locator("#translation")).not_to_be_empty()  # no button pressed
        assert page.evaluate(OFF_SCREEN) == [], "nothing runs off a phone's screen"
        screenshot(page, "playground-phone.png", tmp_path)
        phone.assert_clean(key)
    finally:
        phone.close()


def test_playground_completes_a_prefix_with_an_smt_transfer_engine(
    site: Site, thot_model: Path, watched: Watched
) -> None:
    """The other family that answers prefixes: the page asks a Thot model (served by the same node)
    for the rest of what the translator types, and Tab accepts it."""
    api, client = site.api, site.client
    engine_id = smt_engine(api, client, thot_model)
    answer = client.post(f"/translation/engines/{engine_id}/translate", json=SEGMENT, timeout=90)
    assert answer.status_code == 200, answer.text
    tokens: list[str] = answer.json()["targetTokens"]
    assert tokens, "the Thot model translates the verse"
    key = api.api_key("translator", (READ_ENGINES,))
    page = watched.page
    page.goto(api.rest_url + "/")
    page.fill("#key", key)
    page.click("#use-key")
    expect(page.locator(f"#model option[value='{engine_id}']")).to_be_attached()
    page.select_option("#model", engine_id)
    page.fill("#text", SEGMENT)
    page.click("#translate")
    expect(page.locator("#translation .word")).to_have_count(len(tokens))
    expect(page.locator("#interactive")).to_be_visible()
    prefix = tokens[0] + " "
    page.locator("#prefix").press_sequentially(prefix)
    expect(page.locator("#completion .typed")).to_have_text(prefix)
    completed, rest = completion(client, engine_id, SEGMENT, prefix)
    assert rest.strip(), "the model completes the typed word with the rest of the verse"
    expect(page.locator("#completion .suggested")).to_have_text(rest)
    page.locator("#prefix").press("Tab")
    expect(page.locator("#prefix")).to_have_value(completed)
    watched.assert_clean(key)


# ---- the console -----------------------------------------------------------------------------------


def test_console_shows_the_node_its_model_a_moving_build_and_drains(
    site: Site, tmp_path: Path, watched: Watched
) -> None:
    api, client, engine = site.api, site.client, site.engine
    assert (
        client.post(f"/translation/engines/{engine['id']}/translate", json=SEGMENT, timeout=60).status_code
        == 200
    )
    _, build_id, job_token = start_build(api, client, targetLanguage="fr", name="French draft")
    report_training(api, build_id, job_token, 0.25, 25)
    failing = create_engine(client, targetLanguage="de", name="German draft")
    assert client.post(f"/translation/engines/{failing['id']}/builds", json={}).status_code == 201
    fault = api.launcher.specs[-1]
    report_fault(api, fault.build_id, fault.job_token, "CUDA out of memory at step 12")
    key = api.api_key("ops", (ADMIN,))
    page = watched.page

    answer = page.goto(api.rest_url + "/admin")
    assert answer is not None and answer.status == 200
    page.fill("#key", key)
    page.click("#sign-in")
    expect(page.locator("#state")).to_contain_text("Live")

    # The node that connected, with its loaded model and the engine it serves.
    row = page.locator("#nodes tr[data-node='web-node']")
    expect(row).to_contain_text("serving")
    expect(row).to_contain_text("cpu")
    expect(row.locator(f".models li[data-engine='{engine['id']}']")).to_contain_text("revision 1")
    expect(row.locator(".models")).to_contain_text("ready")
    expect(row.locator(".models")).to_contain_text("MiB")
    expect(row.locator("meter")).to_have_count(2)
    expect(page.locator("#health-status")).to_contain_text("Healthy")
    expect(page.locator("#engine-counts")).to_contain_text("translator")

    # A running build's progress bar moves as its job reports, without a reload.
    build = page.locator(f"#builds tr[data-build='{build_id}']")
    expect(build.locator("progress")).to_have_attribute("value", "0.25")
    expect(build).to_contain_text("Train 25/100")
    report_training(api, build_id, job_token, 0.6, 60)
    expect(build.locator("progress")).to_have_attribute("value", "0.6")
    expect(build.locator(".percent")).to_have_text("60%")
    expect(build).to_contain_text("training step 60")
    failure = page.locator(f"#failures tr[data-build='{fault.build_id}']")
    expect(failure).to_contain_text("CUDA out of memory at step 12")
    expect(failure).to_contain_text(failing["id"])
    console = screenshot(page, "console.png", tmp_path)

    # Drain: the button drains the node (the admin API says so too), and undrains it.
    row.get_by_role("button", name="Drain").click()
    expect(page.locator("#action")).to_have_text("Draining web-node: done.")
    expect(row).to_contain_text("draining")
    expect(row).to_contain_text("drained from the console")
    wait_until(lambda: admin_nodes(api)["web-node"]["drained"], 30, "the node drained")
    row.get_by_role("button", name="Undrain").click()
    expect(page.locator("#action")).to_have_text("Undraining web-node: done.")
    expect(row).to_contain_text("serving")
    wait_until(lambda: not admin_nodes(api)["web-node"]["drained"], 30, "the node undrained")

    # Who uses the node: the owners whose requests are on it now, as the admin API lists them
    # (their figures put in the page's overview, since the tiny model answers in milliseconds;
    # tests/api/test_fair_dispatch.py reads them from a busy node). Names are shown as text.
    def busy(route: Route) -> None:
        response = route.fetch()
        overview = response.json()
        for node in overview["nodes"]:
            node["workByOwner"] = [
                {"owner": "<b>flood</b>", "interactive": 2, "bulk": 30},
                {"owner": "translator", "interactive": 1, "bulk": 0},
            ]
        route.fulfill(response=response, json=overview)

    page.route("**/api/v1/admin/overview*", busy, times=1)  # the overview the click reads
    page.click("#sign-in")
    owners = row.locator("[data-owners]")
    expect(owners).to_have_text("<b>flood</b> 32 (30 bulk) · translator 1")
    expect(owners.locator("b")).to_have_count(0)
    page.click("#sign-in")
    expect(row.locator("[data-owners]")).to_have_count(0)

    # A node token, shown once with the command that starts a node with it.
    page.fill("#token-name", "gpu-pool")
    page.click("#create-token")
    expect(page.locator("#token-command")).to_contain_text("serval node --api-address")
    command = page.locator("#token-command").inner_text()
    assert re.search(r"SERVAL_NODE__TOKEN='node_\S+'", command), command
    assert f":{api.service.grpc_port} " in command
    token = page.locator("#tokens tr", has_text="gpu-pool")
    expect(token.get_by_role("button", name="Revoke")).to_be_visible()
    token.get_by_role("button", name="Revoke").click()
    expect(token).to_contain_text("revoked")

    # An API key bound to an engine, created and revoked.
    page.fill("#key-owner", "translator")
    page.fill("#key-engine", engine["id"])
    page.click("#create-key")
    expect(page.locator("#key-plaintext")).to_contain_text("serval_")
    created = page.locator("#key-plaintext").inner_text().strip()
    with httpx.Client(base_url=api.rest_url, timeout=30) as http:
        languages = http.get("/api/v1/translate/languages/", headers={"X-API-Key": created})
        assert languages.json() == ["eng_Latn", "swh_Latn"], "the new key translates its engine's pair"
        bound = page.locator("#keys tr", has_text=engine["id"])
        expect(bound).to_contain_text("active")
        bound.get_by_role("button", name="Revoke").click()
        expect(bound).to_contain_text("revoked")
        assert http.get("/api/v1/translate/languages/", headers={"X-API-Key": created}).status_code == 401

    # The service stops answering: the page says so at once, and recovers by itself.
    page.route("**/api/v1/admin/overview*", lambda route: route.abort())
    page.click("#sign-in")
    expect(page.locator("#state")).to_contain_text("The service is not answering")
    expect(page.locator("#panels")).to_have_class(re.compile(r"\bstale\b"))
    page.unroute("**/api/v1/admin/overview*")
    expect(page.locator("#state")).to_contain_text("Live")
    watched.assert_clean(key)
    assert console.stat().st_size > 10_000


def test_console_refuses_a_key_without_the_admin_scope(site: Site, watched: Watched) -> None:
    api = site.api
    key = api.api_key("translator", (READ_ENGINES,))
    with httpx.Client(base_url=api.rest_url, headers={"X-API-Key": key}, timeout=30) as http:
        assert http.get("/api/v1/admin/overview").status_code == 403
    page = watched.page
    page.goto(api.rest_url + "/admin")
    page.fill("#key", key)
    page.click("#sign-in")
    expect(page.locator("#state")).to_contain_text("not an administrator's")
    expect(page.locator("#state")).to_contain_text("403")
    expect(page.locator("#state-help")).to_contain_text(
        "serval admin api-key create --owner <you> --scope admin"
    )
    expect(page.locator("#panels")).to_be_hidden()
    page.fill("#key", "serval_not-a-key")
    page.click("#sign-in")
    expect(page.locator("#state")).to_contain_text("The key is not accepted")
    expect(page.locator("#state-help")).to_be_hidden()
    watched.assert_clean(key)


def test_console_shows_engines_build_history_base_models_and_models_by_name(
    site: Site, tmp_path: Path, watched: Watched
) -> None:
    """What an administrator needs besides the fleet: every engine (owner, family, languages,
    current revision, last build, keys bound), the build history, the base models with the
    languages each knows, and the models a node holds by engine name rather than internal ids."""
    api, client = site.api, site.client
    store = open_store((api.service.settings.home / "store").resolve().as_uri())
    named = create_engine(client, targetLanguage="fr", name="Psalms draft")
    inference_only_build(api, client, store, named)
    translate(client, named["id"], SEGMENT)  # the node now serves it (the base model's weights)
    failing, faulted, token = start_build(api, client, targetLanguage="de", name="Hymns draft")
    report_fault(api, faulted, token, "the tokenizer refused at step 3")
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.bin").write_bytes(b"\0" * 4096)
    publish_folder(
        store,
        "base-models/pair-only",
        weights,
        Manifest(kind="base-model", name="pair-only", languages=["eng_Latn", "swh_Latn"]),
    )
    key = api.api_key("ops", (ADMIN,))
    with httpx.Client(base_url=api.rest_url, headers={"X-API-Key": key}, timeout=30) as http:
        bound = http.post(
            "/api/v1/admin/api-keys",
            json={"owner": "translator", "scopes": [READ_ENGINES], "engineId": named["id"]},
        )
        assert bound.status_code == 201, bound.text
    page = watched.page
    page.goto(api.rest_url + "/admin")
    page.fill("#key", key)
    page.click("#sign-in")
    expect(page.locator("#state")).to_contain_text("Live")

    psalms = page.locator(f"#engines tr[data-engine='{named['id']}']")
    for shown in ("Psalms draft", named["id"], "translator", "nmt", "en → fr", "Completed"):
        expect(psalms).to_contain_text(shown)
    expect(psalms.locator("td.num")).to_have_text("1")
    expect(psalms.locator(f".bound li[data-key='{bound.json()['id']}']")).to_contain_text(
        bound.json()["prefix"]
    )
    hymns = page.locator(f"#engines tr[data-engine='{failing}']")
    expect(hymns).to_contain_text("Faulted")
    expect(hymns).to_contain_text("the tokenizer refused at step 3")
    expect(hymns.locator("td.num")).to_have_text("none")
    page.fill("#engine-filter", "psalms")
    expect(page.locator("#engines tbody tr")).to_have_count(1)
    page.fill("#engine-filter", "")

    history = page.locator(f"#history tr[data-build='{faulted}']")
    expect(history).to_contain_text("Hymns draft")
    expect(history).to_contain_text(faulted)
    expect(history).to_contain_text("the tokenizer refused at step 3")

    expect(page.locator("#base-models tr[data-base-model='pair-only']")).to_contain_text("eng_Latn, swh_Latn")
    base = page.locator(f"#base-models tr[data-base-model='{BASE_MODEL}']")
    expect(base).to_contain_text("all NLLB languages")
    expect(base).to_contain_text("default")

    held = page.locator(f"#nodes tr[data-node='web-node'] .models li[data-engine='{named['id']}']")
    expect(held).to_contain_text("Psalms draft")
    expect(held).to_contain_text("revision 1")
    expect(page.locator("#nodes tr[data-node='web-node'] .models")).not_to_contain_text("w-")
    screenshot(page, "console-engines.png", tmp_path)
    watched.assert_clean(key)


def test_the_api_reference_loads_nothing_from_another_site(site: Site, watched: Watched) -> None:
    """The pages' "API reference" link: Swagger UI at /docs renders this service's operations from
    scripts this service serves (FastAPI's default fetches them from a CDN, which a closed network
    never answers). There is no /redoc: ReDoc fetches its logo from redoc.ly."""
    page = watched.page
    page.goto(site.api.rest_url + "/")
    page.click("text=API reference")
    expect(page).to_have_url(re.compile(r"/docs$"))
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Serval Live")
    operation = page.locator(".opblock-summary-path", has_text="/api/v1/translation/engines").first
    expect(operation).to_be_visible()
    assert any(u.endswith("/docs-assets/swagger-ui-bundle.js") for u in watched.urls), watched.urls
    own = (site.api.rest_url, f"blob:{site.api.rest_url}")
    assert not [u for u in watched.urls if not u.startswith(own)], "nothing from another site"
    assert httpx.get(site.api.rest_url + "/redoc", timeout=30).status_code == 404


def test_both_pages_say_so_when_the_service_is_down(tmp_path: Path, watched: Watched) -> None:
    """An API service of its own, stopped while both pages are open: each says the service is not
    answering (no endless spinner), and the console keeps what it showed, marked stale."""
    with fresh_database(tmp_path) as database_url:
        api = RunningApi(api_settings(tmp_path, database_url))
        stopped = False
        try:
            key = api.api_key("ops", (ADMIN, READ_ENGINES))
            console = watched.page
            console.goto(api.rest_url + "/admin")
            console.fill("#key", key)
            console.click("#sign-in")
            expect(console.locator("#state")).to_contain_text("Live")
            expect(console.locator("#health-status")).not_to_be_empty()  # Degraded: no node here
            health = console.locator("#health-status").inner_text()
            playground = watched.context.new_page()
            playground.goto(api.rest_url + "/")
            playground.fill("#key", key)
            playground.click("#use-key")
            expect(playground.locator("#status")).to_contain_text("No model is published")  # it answers

            api.close()
            stopped = True
            expect(console.locator("#state")).to_contain_text("The service is not answering")
            expect(console.locator("#panels")).to_have_class(re.compile(r"\bstale\b"))
            expect(console.locator("#health-status")).to_have_text(health)  # what it last knew
            playground.click("#use-key")
            expect(playground.locator("#status")).to_contain_text("The service is not answering")
            watched.assert_clean(key)
        finally:
            if not stopped:
                api.close()
