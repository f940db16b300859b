"""The languages a base model's manifest lists are what the dialects offer: the demo's tiny model
(made as `serval demo` and `serval admin base-model make-tiny` make it) knows English and Swahili,
so LibreTranslate's `/languages` and SIL Converters' list show those two, and a pair with another
language is a 400 that names it and the model's languages, through both dialects, before any node
is asked."""

from __future__ import annotations

import httpx
import pytest

from serval_cli.base_models import make_tiny
from serval_cli.corpus import demo_pairs
from serval_common.manifest import Manifest, read_manifest
from serval_common.store import open_store
from tests.api.conftest import RunningApi, create_engine

SIL_LANGUAGES = "/api/v1/translate/languages/"
SIL_TRANSLATE = "/api/v1/translate/"


@pytest.fixture
def demo_model(api: RunningApi) -> str:
    """The public base model (`jobs.default_base_model`), made as the demo makes it."""
    name = api.service.settings.jobs.default_base_model
    pairs = demo_pairs()[:40]
    store = open_store(api.service.settings.resolved_store_url)
    make_tiny(
        store,
        name,
        source_lines=[p.source for p in pairs],
        target_lines=[p.target for p in pairs],
        source_code="eng_Latn",
        target_code="swh_Latn",
        steps=1,
    )
    assert read_manifest(store, f"base-models/{name}").languages == ["eng_Latn", "swh_Latn"]
    return name


def test_the_demo_model_lists_and_serves_only_its_two_languages(api: RunningApi, demo_model: str) -> None:
    key = api.api_key()
    with httpx.Client(base_url=api.rest_url, timeout=60) as http:
        libre = http.get("/languages")
        assert libre.status_code == 200, libre.text
        assert libre.json() == [
            {"code": "en", "name": "English", "targets": ["sw"]},
            {"code": "sw", "name": "Swahili", "targets": ["en"]},
        ]
        sil = http.get(SIL_LANGUAGES, headers={"Authorization": f"SIL-NLLB-Auth-Key {key}"})
        assert sil.status_code == 200, sil.text
        assert sil.json() == ["eng_Latn", "swh_Latn"]

        french = http.post("/translate", json={"q": "Hello.", "source": "en", "target": "fr", "api_key": key})
        assert french.status_code == 400
        assert french.json() == {"error": "fr is not supported; translate into English (en) or Swahili (sw)"}
        from_french = http.post(
            "/translate", json={"q": "Bonjour.", "source": "fr", "target": "sw", "api_key": key}
        )
        assert from_french.status_code == 400
        assert from_french.json() == {
            "error": "fr is not supported; translate from English (en) or Swahili (sw)"
        }

        converter = http.post(
            SIL_TRANSLATE,
            headers={"Authorization": f"SIL-NLLB-Auth-Key {key}"},
            json={"sourceLanguage": "eng_Latn", "targetLanguage": "fra_Latn", "text": "Hello."},
        )
        assert converter.status_code == 400
        assert converter.json() == {
            "error": f"'fra_Latn' is not a language this service translates; its model {demo_model} knows "
            "eng_Latn and swh_Latn, so choose one of those."
        }


def test_a_base_model_manifest_without_languages_knows_all_202() -> None:
    """Stores written before manifests listed languages held full NLLB-200 checkpoints only."""
    old = Manifest.model_validate_json('{"kind": "base-model", "name": "nllb-600m"}')
    assert len(old.languages) == 202 and old.languages[:2] == ["ace_Arab", "ace_Latn"]
    listed = Manifest.model_validate_json('{"kind": "base-model", "name": "x", "languages": ["eng_Latn"]}')
    assert listed.languages == ["eng_Latn"]
    revision = Manifest.model_validate_json('{"kind": "model-revision"}')
    assert revision.languages == []


def test_an_inference_only_build_of_languages_the_base_model_lacks_is_refused_at_start(
    api: RunningApi, demo_model: str
) -> None:
    """It would serve the base model as it is, which cannot translate into French: 400 with the
    build job's sentence, nothing recorded; an inference-only build of the model's own pair starts
    (a build that trains may add a language: tests/test_base_model_import.py)."""
    with api.client() as client:
        french = create_engine(client, sourceLanguage="en", targetLanguage="fr")["id"]
        refused = client.post(f"/translation/engines/{french}/builds", json={"trainOn": []})
        assert refused.status_code == 400, refused.text
        assert refused.json()["message"] == (
            f"base model '{demo_model}' does not know fra_Latn; it knows eng_Latn and swh_Latn, and an "
            "inference-only build serves only those: train on parallel texts to add a language."
        )
        assert client.get(f"/translation/engines/{french}/builds").json() == [], "nothing recorded"

        swahili = create_engine(client)["id"]
        assert client.post(f"/translation/engines/{swahili}/builds", json={"trainOn": []}).status_code == 201
        again = client.post(f"/translation/engines/{french}/builds", json={})
        assert again.status_code == 400, "without corpora to train on, a build is inference-only too"
