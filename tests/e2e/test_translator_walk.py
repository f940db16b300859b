"""A translator's path from two text files to translations in their tools, against the real API
service and inference node of `serval demo` (tests/e2e/conftest.py's `deployment`), each step as
the translator (or their administrator) takes it:

1. two text files of Matthew, English and Swahili, one verse a line, the last four Swahili verses
   not translated yet (two lines left empty, two missing);
2. `serval train` on them with the key docs/own-texts.md tells an administrator to make (a real
   `python -m build_jobs` fine-tune of the tiny base model, then drafts of the four verses);
3. a key bound to the new engine (`serval admin api-key create --engine`), used as SIL Converters'
   NLLB Translator uses it: its exact requests, answered by the fine-tuned model;
4. the playground in Debian's chromium: the engine chosen by its name, a verse translated.

The second test is the playground's errors under real conditions on the same deployment: the only
node drained by an administrator (503) and a key over its per-minute limit (429), each shown as a
sentence that says what to do, with the last translation gone from the screen.

Every wait is bounded (subprocess timeouts, Playwright's `expect`, `wait_until`); nothing is timed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from serval_api.auth import CREATE_ENGINES, CREATE_FILES, READ_ENGINES, READ_FILES, UPDATE_ENGINES
from serval_api.service.text_translation import BUSY_MESSAGE, split_sentences
from tests.e2e.browser import Watched
from tests.e2e.conftest import Deployment
from tests.e2e.test_sil_converters import SilConverters
from tests.helpers import verse_pairs, wait_until

pytestmark = [
    pytest.mark.sqlite_pass_only,  # the database work is the API tests'; this is the path through the parts
    pytest.mark.timeout(300),
]

ENGLISH, SWAHILI = "eng_Latn", "swh_Latn"
SKIP = 300
"""The verse pairs the tiny base model was trained on (`tiny_ct2_model`): the walk uses the next ones."""
VERSES = 40
MISSING = 4
"""The last verses of the Swahili file not translated yet: two empty lines, then two lines missing."""
TEAM = "team-swahili"
ENGINE_NAME = "Matthew, Swahili"
TRAINING_STEPS = 20
"""Enough to change the tiny model's weights, few enough for a fine-tune of seconds."""
TRAIN_TIMEOUT_S = 240
CLI_TIMEOUT_S = 60
TRAIN_KEY_SCOPES = (READ_ENGINES, CREATE_ENGINES, UPDATE_ENGINES, READ_FILES, CREATE_FILES)
"""docs/own-texts.md's "key to train with"."""
VERSE_TO_TRY = "In the beginning was the Word, and the Word was with God."


def root_url(deployment: Deployment) -> str:
    """The API service's address, as a translator is given it (no path)."""
    url = deployment.rest.base_url
    return f"{url.scheme}://{url.host}:{url.port}"


def serval(*args: str, env: dict[str, str], cwd: Path, timeout_s: float = CLI_TIMEOUT_S) -> str:
    """`serval ARGS` as a separate process, with only the given SERVAL_* variables; its output
    (stdout, then stderr), checked to have exited 0."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SERVAL_")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "serval_cli", *args],
            cwd=cwd,
            env={**clean, **env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"`serval {' '.join(args)}` did not finish within {timeout_s:g} s; it printed:\n{exc.stdout}"
        )
    output = done.stdout + done.stderr
    print(f"$ serval {' '.join(args)}\n{output}")  # shown when the test fails
    assert done.returncode == 0, f"`serval {' '.join(args)}` exited {done.returncode}:\n{output}"
    return output


def admin_key_create(database_url: str, cwd: Path, *args: str) -> str:
    """`serval admin api-key create ARGS` on the service's database, as an administrator makes
    keys (docs/own-texts.md#keys): the key is the last line it prints."""
    output = serval("admin", "api-key", "create", *args, env={"SERVAL_DATABASE_URL": database_url}, cwd=cwd)
    keys = re.findall(r"^serval_\S+$", output, re.MULTILINE)
    assert len(keys) == 1, f"no key printed:\n{output}"
    return str(keys[0])


def open_playground(page: Page, url: str, key: str) -> None:
    answer = page.goto(url + "/")
    assert answer is not None and answer.status == 200, "the playground did not load"
    page.fill("#key", key)
    page.click("#use-key")
    expect(page.locator("#status")).to_contain_text("languages")


def test_a_translator_trains_on_two_files_and_translates_in_sil_converters_and_the_playground(
    deployment: Deployment, e2e_database_url: str, watched: Watched, tmp_path: Path
) -> None:
    url = root_url(deployment)

    # 1. Two files of Matthew, one verse a line; the last four Swahili verses are to draft.
    english, swahili = verse_pairs("engwebp", "swh1850", SKIP + VERSES)
    english, swahili = english[SKIP:], swahili[SKIP:]
    source, target = tmp_path / "mat.en.txt", tmp_path / "mat.sw.txt"
    source.write_text("\n".join(english) + "\n", encoding="utf-8")
    target.write_text("\n".join(swahili[:-MISSING]) + "\n" + "\n" * (MISSING // 2), encoding="utf-8")

    # 2. The administrator makes the team's key to train with; the translator trains.
    train_key = admin_key_create(
        e2e_database_url, tmp_path, "--owner", TEAM, *[f"--scope={scope}" for scope in TRAIN_KEY_SCOPES]
    )
    drafts = tmp_path / "drafts.json"
    output = serval(
        "train", source.name, target.name, "-s", "en", "-t", "sw", "--type", "nmt", "--name", ENGINE_NAME,
        "--options", json.dumps({"maxSteps": TRAINING_STEPS}), "--drafts", drafts.name,
        env={"SERVAL_URL": url, "SERVAL_API_KEY": train_key}, cwd=tmp_path, timeout_s=TRAIN_TIMEOUT_S,
    )  # fmt: skip
    created = re.search(rf'^created engine (\w+) "{re.escape(ENGINE_NAME)}" \(en → sw, nmt\)$', output, re.M)
    assert created, output
    engine_id = created.group(1)
    completed = re.search(r"^build (\w+) Completed: published revision 1: trained (\d+) steps", output, re.M)
    assert completed and int(completed.group(2)) == TRAINING_STEPS, output
    assert f"{MISSING} drafts (pretranslations) at {url}/api/v1/translation/engines/{engine_id}/" in output
    assert f"saved the drafts as JSON to {drafts.name}" in output, output

    rows = json.loads(drafts.read_text(encoding="utf-8"))
    assert [row["sourceRefs"] for row in rows] == [
        [f"mat:{line}"] for line in range(VERSES - MISSING + 1, VERSES + 1)
    ], "a draft for each verse the Swahili lacks, and only those"
    assert all(isinstance(row["translation"], str) and row["translation"].strip() for row in rows), rows

    with httpx.Client(base_url=f"{url}/api/v1", headers={"X-API-Key": train_key}, timeout=60) as team:
        engine: dict[str, Any] = team.get(f"/translation/engines/{engine_id}").json()
        assert (engine["name"], engine["type"], engine["modelRevision"]) == (ENGINE_NAME, "nmt", 1), engine
        (build,) = team.get(f"/translation/engines/{engine_id}/builds").json()
        assert build["id"] == completed.group(1) and build["state"] == "Completed", build
        assert build["executionData"]["trainCount"] > 0, "it fine-tuned on the translated verses"

        # What the engine's own REST API answers for a verse still to translate (one sentence, so
        # that SIL Converters' sentence splitting sends it whole).
        verse = next(v for v in english[-MISSING:] if len(split_sentences(v, ENGLISH)) == 1)
        answer = team.post(f"/translation/engines/{engine_id}/translate", json=verse)
        assert answer.status_code == 200, answer.text
        assert answer.headers["X-Model-Revision"] == "1", "the fine-tuned revision answers"
        expected: str = answer.json()["translation"]
        assert expected.strip()

    # 3. SIL Converters with a key bound to the engine, as docs/own-texts.md makes it.
    bound_key = admin_key_create(
        e2e_database_url, tmp_path, "--owner", TEAM, "--engine", engine_id, "--scope", READ_ENGINES
    )
    converter = SilConverters(url, bound_key)
    try:
        assert converter.languages() == [ENGLISH, SWAHILI], (
            "the bound engine's pair, as the converter lists it"
        )
        shown = converter.translate(ENGLISH, SWAHILI, verse)
        assert shown.status == 200, shown.text
        # The dialect names no model revision: the engine's REST answer above (X-Model-Revision 1)
        # and its modelRevision say which one this is.
        assert shown.text == expected, "the converter gets the fine-tuned engine's translation"
    finally:
        converter.close()

    # 4. The playground: the translator's key, the engine chosen by its name, the verse translated.
    page = watched.page
    open_playground(page, url, train_key)
    label = f"{ENGINE_NAME} (English → Swahili)"
    expect(page.locator("#model option", has_text=label)).to_be_attached()
    page.select_option("#model", label=label)
    expect(page.locator("#model")).to_have_value(engine_id)
    expect(page.locator("#source")).to_have_value(f"English ({ENGLISH})")
    expect(page.locator("#target")).to_have_value(f"Swahili ({SWAHILI})")
    page.fill("#text", verse)
    page.click("#translate")
    expect(page.locator("#status")).to_contain_text("Translated in")
    expect(page.locator("#revision")).to_have_text("revision 1")
    expect(page.locator("#translation")).to_have_text(expected)
    expect(page.locator("#problem")).to_be_hidden()
    watched.assert_clean(train_key)


def output_state(page: Page) -> str:
    """What the result area shows once the request in flight is answered: done or error."""
    expect(page.locator("#output")).not_to_have_attribute("data-state", "loading")
    return page.locator("#output").get_attribute("data-state") or ""


def translated(page: Page) -> None:
    """Translate the text; the page shows a translation."""
    page.click("#translate")
    assert output_state(page) == "done", page.locator("#problem").inner_text()
    expect(page.locator("#translation")).not_to_be_empty()
    expect(page.locator("#copy")).to_be_enabled()


def shows_only_the_problem(page: Page, sentence: str | re.Pattern[str], status: int) -> None:
    """The error's sentence, and nothing left of the last translation."""
    expect(page.locator("#problem")).to_be_visible()
    expect(page.locator("#problem")).to_have_text(sentence)
    expect(page.locator("#sample-response")).to_contain_text(f"HTTP {status}")
    expect(page.locator("#translation")).to_be_empty()
    expect(page.locator("#alternatives li")).to_have_count(0)
    expect(page.locator("#details")).to_be_hidden()
    expect(page.locator("#copy")).to_be_disabled()


def test_the_playground_says_what_to_do_when_the_service_is_busy_or_the_key_is_over_its_limit(
    deployment: Deployment, e2e_database_url: str, watched: Watched, tmp_path: Path
) -> None:
    """503 and 429 from the service, under real conditions (playground.js `forTranslator`): the
    deployment's only node drained by an administrator, then the key's per-minute limit set to one
    translation. The public base model answers (LibreTranslate's `/translate`, the page's default)."""
    url = root_url(deployment)
    admin_key = admin_key_create(e2e_database_url, tmp_path, "--owner", "ops", "--scope", "admin")
    with httpx.Client(base_url=f"{url}/api/v1/admin", headers={"X-API-Key": admin_key}, timeout=60) as admin:
        made = admin.post("/api-keys", json={"owner": "team-hausa", "scopes": [READ_ENGINES]})
        assert made.status_code == 201, made.text
        key_id, key = made.json()["id"], made.json()["key"]
        page = watched.page
        open_playground(page, url, key)
        expect(page.locator("#model")).to_have_value("")  # the public base model
        expect(page.locator("#source")).to_have_value(f"English ({ENGLISH})")
        expect(page.locator("#target")).to_have_value(f"Swahili ({SWAHILI})")
        page.fill("#text", VERSE_TO_TRY)
        translated(page)

        # 503: no node takes work (every one is draining).
        drained = admin.post("/nodes/e2e-node/drain", json={"reason": "the translator walk's busy service"})
        assert drained.status_code == 200, drained.text
        try:
            page.click("#translate")
            assert output_state(page) == "error", "the page translated with every node drained"
            shows_only_the_problem(page, BUSY_MESSAGE, 503)
            assert BUSY_MESSAGE == (
                "The translation service is busy or has no translation server running; try again in a minute."
            )
        finally:
            undrained = admin.post("/nodes/e2e-node/undrain")
            assert undrained.status_code == 200, undrained.text
        wait_until(
            lambda: admin.get("/nodes/e2e-node").json()["status"] == "serving",
            60,
            "the undrained node did not serve again",
            interval_s=0.2,
        )
        translated(page)

        # 429: the key may translate once a minute. Counts are per clock minute, so the request
        # after the one that used the minute's allowance is refused; a minute that ends between two
        # clicks gives a new allowance, hence up to three clicks.
        limited = admin.put(f"/api-keys/{key_id}/limits", json={"translatePerMinute": 1})
        assert limited.status_code == 200, limited.text
        for _ in range(3):
            expect(page.locator("#translation")).not_to_be_empty()  # the last translation is on screen
            page.click("#translate")
            if output_state(page) == "error":
                break
        else:
            pytest.fail("a key limited to one translation a minute translated three times running")
        shows_only_the_problem(
            page,
            re.compile(
                r"^This key has translated as much as it may for now: wait \d+ seconds? and try again\.$"
            ),
            429,
        )
    watched.assert_clean(key)
