"""The core of the dialects that name languages, not engines (SIL Converters, LibreTranslate):
which model answers a key, sentences split and joined as the translator wrote them, text-only
answers, and errors a translator can act on. An in-process API service and a real node process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serval_api.auth import ALL_ENGINE_SCOPES, Caller
from serval_api.errors import InvalidArgument, NotFound
from serval_api.service import Services, text_translation
from serval_api.service.keys import create_node_token
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi
from tests.e2e.nodes import BASE, Node, built_engines, translate
from tests.helpers import verse_pairs

SCOPES = frozenset(ALL_ENGINE_SCOPES)


def services_of(api: RunningApi) -> Services:
    assert api.service.services is not None
    return api.service.services


@pytest.mark.parametrize(
    ("code", "text", "sentences"),
    [
        ("eng_Latn", "In the beginning. God created!  Then light?\nAnd it was good", 4),
        ("hin_Deva", "यह एक वाक्य है। यह दूसरा है।", 2),
        ("arb_Arab", "هل أنت بخير؟ نعم.", 2),
        ("amh_Ethi", "ይህ አረፍተ ነገር ነው። ሁለተኛ ነው።", 2),
        ("zho_Hans", "这是一个句子。这是第二个。", 2),
    ],
)
def test_text_is_split_into_sentences_that_join_back_to_it(code: str, text: str, sentences: int) -> None:
    pieces = text_translation.split_sentences(text, code)
    assert "".join(pieces) == text
    assert len([p for p in pieces if p.strip()]) == sentences


@pytest.fixture
def node(api: RunningApi, store: ModelStore, tmp_path: Path) -> Iterator[Node]:
    _, token = api.run(create_node_token(services_of(api).db, "text"))
    started = Node(api, tmp_path, token, "text-node")
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.sqlite_pass_only
def test_unbound_keys_use_the_public_base_model_and_bound_keys_their_engine(
    api: RunningApi, store: ModelStore, node: Node
) -> None:
    services = services_of(api)
    sources, _ = verse_pairs("engwebp", "swh1850", 3)
    text = f"{sources[0]}  {sources[1]}\n{sources[2]}"
    unbound = Caller("owner-a", SCOPES)

    languages = api.run(text_translation.languages(services, unbound))
    assert {"eng_Latn", "swh_Latn", "hin_Deva"} <= set(languages) and len(languages) >= 200
    answer = api.run(
        text_translation.translate_text(services, unbound, "eng_Latn", "swh_Latn", text, alternatives=1)
    )
    alone = [
        api.run(text_translation.translate_text(services, unbound, "eng_Latn", "swh_Latn", s)).translation
        for s in sources
    ]
    assert answer.translation == f"{alone[0]}  {alone[1]}\n{alone[2]}", (
        "sentences joined with the original spacing"
    )
    assert len(answer.alternatives) == 1 and answer.alternatives[0].count("\n") == 1
    french = api.run(text_translation.translate_text(services, unbound, "eng_Latn", "fra_Latn", sources[0]))
    assert french.translation != alone[0]

    [(client, engine)] = built_engines(api, store, 1)
    bound = Caller("owner-a", SCOPES, engine_id=engine["id"])
    assert api.run(text_translation.languages(services, bound)) == ("eng_Latn", "swh_Latn")
    own = api.run(text_translation.translate_text(services, bound, "eng_Latn", "swh_Latn", sources[0]))
    assert own.translation == translate(client, engine["id"], sources[0]).json()["translation"]
    assert node.loads() == 1, "the engine's inference-only revision shares the public base model's weights"

    refused = [
        (unbound, "eng_Latn", "xyz_Latn", "hi", "is not a language this service translates"),
        (unbound, "eng_Latn", "eng_Latn", "hi", "the same"),
        (unbound, "eng_Latn", "swh_Latn", "   ", "There is no text to translate."),
        (unbound, "eng_Latn", "swh_Latn", "a" * 5001, "longer than 5000 characters"),
        (bound, "eng_Latn", "fra_Latn", "hi", "translates eng_Latn to swh_Latn only"),
    ]
    for caller, source, target, sent, message in refused:
        with pytest.raises(InvalidArgument, match=message):
            api.run(text_translation.translate_text(services, caller, source, target, sent))
    stranger = Caller("owner-b", SCOPES, engine_id=engine["id"])
    with pytest.raises(NotFound, match="no longer exists"):
        api.run(text_translation.translate_text(services, stranger, "eng_Latn", "swh_Latn", "hi"))


@pytest.mark.sqlite_pass_only
def test_a_model_that_is_not_ready_in_time_answers_loading_and_goes_on_loading(
    api: RunningApi, store: ModelStore, tmp_path: Path
) -> None:
    services = services_of(api)
    services.settings.api.text_load_wait_s = 0.0
    unbound = Caller("owner-a", SCOPES)
    _, token = api.run(create_node_token(services.db, "text"))
    node = Node(api, tmp_path, token, "cold-node")
    try:
        with pytest.raises(text_translation.ModelLoading) as loading:
            api.run(
                text_translation.translate_text(services, unbound, "eng_Latn", "swh_Latn", "In the beginning")
            )
        assert loading.value.message == text_translation.LOADING_MESSAGE and loading.value.retry_after_s
        services.settings.api.text_load_wait_s = 60.0
        answer = api.run(
            text_translation.translate_text(services, unbound, "eng_Latn", "swh_Latn", "In the beginning")
        )
        assert answer.translation and node.loads() == 1
    finally:
        node.stop()
    assert text_translation.public_base_model(services) == BASE
