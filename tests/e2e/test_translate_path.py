"""The whole path: client → API service → build job → model store → inference node →
CTranslate2, over REST and gRPC, and the status codes of bad input on that path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import ctranslate2
import grpc
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_common.nllb_tokenizer import NllbTokenizer
from serval_common.settings import NodeSettings
from tests.e2e.conftest import MAX_SEGMENT_CHARS, Deployment, wait_for_build

VERSE = "Blessed are the peacemakers, for they shall be called children of God."


def built_engine(deployment: Deployment, **options: Any) -> dict[str, Any]:
    """An en→sw engine after an inference-only build (empty trainOn)."""
    rest = deployment.rest
    engine = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    ).json()
    body: dict[str, Any] = {"trainOn": []}
    if options:
        body["options"] = options
    response = rest.post(f"/translation/engines/{engine['id']}/builds", json=body)
    assert response.status_code == 201, response.text
    build = response.json()
    build = wait_for_build(rest, engine["id"], build, timeout_s=120)
    engine["build"] = build
    return engine


@pytest.fixture(scope="module")
def engine(deployment: Deployment) -> dict[str, Any]:
    engine = built_engine(deployment)
    assert engine["build"]["state"] == "Completed", engine["build"]
    return engine


def direct_translation(model_dir: Path, segment: str) -> tuple[str, list[str]]:
    """CTranslate2 called directly on the same tokens, with the node's default decoding settings."""
    tokenizer = NllbTokenizer.from_folder(model_dir)
    source = tokenizer.encode(segment, "eng_Latn").tokens
    settings = NodeSettings()
    translator = ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=1)
    result = translator.translate_batch(
        [source],
        target_prefix=[["swh_Latn"]],
        beam_size=settings.beam_size,
        max_input_length=0,
        max_decoding_length=settings.max_decoding_length + 1,
    )[0]
    pieces = [p for p in result.hypotheses[0] if p not in ("swh_Latn", "</s>")]
    decoded = tokenizer.decode(pieces)
    return decoded.translation, decoded.tokens


def test_inference_only_build_publishes_revision_1(deployment: Deployment, engine: dict[str, Any]) -> None:
    current = deployment.rest.get(f"/translation/engines/{engine['id']}").json()
    assert current["modelRevision"] == 1
    manifest = deployment.home / "store" / "models" / engine["id"] / "1" / "manifest.json"
    assert '"weights_from": "base-models/tiny-nllb"' in manifest.read_text()


def test_rest_and_grpc_answer_what_ctranslate2_computes(
    deployment: Deployment, engine: dict[str, Any], tiny_ct2_model: Path
) -> None:
    response = deployment.rest.post(f"/translation/engines/{engine['id']}/translate", json=VERSE)
    assert response.status_code == 200, response.text
    result = response.json()
    assert response.headers["X-Model-Revision"] == "1"

    translation, words = direct_translation(tiny_ct2_model, VERSE)
    assert len(words) >= 3, "the fixture model must say something for this comparison to mean anything"
    assert result["translation"] == translation
    assert result["targetTokens"] == words
    assert result["sourceTokens"][:3] == ["Blessed", "are", "the"]
    assert all(token in VERSE for token in result["sourceTokens"])
    assert len(result["confidences"]) == len(result["targetTokens"])
    assert all(0 < c <= 1 for c in result["confidences"])
    assert all(s == ["Primary"] for s in result["sources"])
    for pair in result["alignment"]:
        assert 0 <= pair["sourceIndex"] < len(result["sourceTokens"])
        assert 0 <= pair["targetIndex"] < len(result["targetTokens"])

    stub = engine_pb2_grpc.TranslationEngineApiStub(deployment.channel)
    reply, call = stub.Translate.with_call(
        engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine["id"], segment=VERSE, n=1),
        metadata=deployment.metadata,
        timeout=60,
    )
    assert ("x-model-revision", "1") in call.trailing_metadata()
    assert reply.results[0].translation == translation
    assert list(reply.results[0].target_tokens) == words


def test_n_best(deployment: Deployment, engine: dict[str, Any]) -> None:
    best = deployment.rest.post(f"/translation/engines/{engine['id']}/translate", json=VERSE).json()
    response = deployment.rest.post(f"/translation/engines/{engine['id']}/translate/3", json=VERSE)
    assert response.status_code == 200, response.text
    results = response.json()
    assert 1 <= len(results) <= 3
    assert len({tuple(r["targetTokens"]) for r in results}) == len(results), "n-best results are distinct"
    assert results[0]["translation"] == best["translation"]


def test_word_graph_best_path_reads_like_translate(deployment: Deployment, engine: dict[str, Any]) -> None:
    best = deployment.rest.post(f"/translation/engines/{engine['id']}/translate", json=VERSE).json()
    response = deployment.rest.post(f"/translation/engines/{engine['id']}/get-word-graph", json=VERSE)
    assert response.status_code == 200, response.text
    graph = response.json()
    assert graph["sourceTokens"] == best["sourceTokens"]
    arcs = graph["arcs"]
    assert {"prevState", "nextState", "score", "targetTokens", "confidences", "sourceSegmentStart",
            "sourceSegmentEnd", "alignment", "sources"} <= set(arcs[0])  # fmt: skip

    def best_words(state: int) -> tuple[float, list[str]]:
        options = [(0.0, [])] if state in graph["finalStates"] else []
        for arc in (a for a in arcs if a["prevState"] == state):
            score, words = best_words(arc["nextState"])
            options.append((arc["score"] + score, arc["targetTokens"] + words))
        return max(options, key=lambda option: option[0])

    assert best_words(0)[1] == best["targetTokens"]

    stub = engine_pb2_grpc.TranslationEngineApiStub(deployment.channel)
    reply = stub.GetWordGraph(
        engine_pb2.GetWordGraphRequest(engine_type="Nmt", engine_id=engine["id"], segment=VERSE),
        metadata=deployment.metadata,
        timeout=60,
    )
    assert len(reply.word_graph.arcs) == len(arcs)
    assert list(reply.word_graph.final_states) == graph["finalStates"]


def test_translate_prefix(deployment: Deployment, engine: dict[str, Any]) -> None:
    best = deployment.rest.post(f"/translation/engines/{engine['id']}/translate", json=VERSE).json()
    prefix = " ".join([*best["targetTokens"][:1], "na"])
    response = deployment.rest.post(
        f"/translation/engines/{engine['id']}/translate-prefix",
        json={"segment": VERSE, "prefix": prefix, "n": 2},
    )
    assert response.status_code == 200, response.text
    results = response.json()
    assert 1 <= len(results) <= 2
    assert all(r["translation"].startswith(prefix) for r in results)

    stub = engine_pb2_grpc.TranslationEngineApiStub(deployment.channel)
    reply = stub.TranslatePrefix(
        engine_pb2.TranslatePrefixRequest(
            engine_type="Nmt", engine_id=engine["id"], segment=VERSE, prefix=prefix, n=1
        ),
        metadata=deployment.metadata,
        timeout=60,
    )
    assert reply.results[0].translation == results[0]["translation"]


def test_rest_errors(deployment: Deployment, engine: dict[str, Any]) -> None:
    rest = deployment.rest
    assert rest.post("/translation/engines/000000000000000000000000/translate", json=VERSE).status_code == 404
    unbuilt = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    ).json()
    assert rest.post(f"/translation/engines/{unbuilt['id']}/translate", json=VERSE).status_code == 409
    assert rest.post(f"/translation/engines/{engine['id']}/translate", json="  ").status_code == 400
    too_long = "word " * MAX_SEGMENT_CHARS
    assert rest.post(f"/translation/engines/{engine['id']}/translate", json=too_long).status_code == 413
    assert rest.post(f"/translation/engines/{engine['id']}/translate/0", json=VERSE).status_code == 400
    bad_language = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "not a tag!", "type": "nmt"}
    )
    assert bad_language.status_code == 400
    assert "targetLanguage" in bad_language.text
    assert (
        rest.post(
            f"/translation/engines/{engine['id']}/translate", json=VERSE, headers={"X-API-Key": "x"}
        ).status_code
        == 401
    )


def test_grpc_errors(deployment: Deployment, engine: dict[str, Any]) -> None:
    stub = engine_pb2_grpc.TranslationEngineApiStub(deployment.channel)

    def code(**fields: Any) -> grpc.StatusCode:
        request = engine_pb2.TranslateRequest(engine_type="Nmt", **fields)
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(request, metadata=deployment.metadata, timeout=30)
        return err.value.code()  # type: ignore[no-any-return]

    assert code(engine_id="000000000000000000000000", segment=VERSE) == grpc.StatusCode.NOT_FOUND
    stub.Create(
        engine_pb2.CreateRequest(
            engine_type="Nmt", engine_id="grpc-unbuilt", source_language="en", target_language="sw"
        ),
        metadata=deployment.metadata,
    )
    assert code(engine_id="grpc-unbuilt", segment=VERSE) == grpc.StatusCode.FAILED_PRECONDITION
    assert code(engine_id=engine["id"], segment="") == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        code(engine_id=engine["id"], segment="x" * (MAX_SEGMENT_CHARS + 1))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.Create(
            engine_pb2.CreateRequest(
                engine_type="Nmt", engine_id="bad-lang", source_language="en", target_language="!!"
            ),
            metadata=deployment.metadata,
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unknown_base_model_is_refused_when_the_build_starts(deployment: Deployment) -> None:
    rest = deployment.rest
    engine = rest.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
    ).json()
    for name in ("no-such-model", "../models/x/1"):
        body = {"trainOn": [], "options": {"baseModel": name}}
        response = rest.post(f"/translation/engines/{engine['id']}/builds", json=body)
        assert response.status_code == 400, response.text
        assert "baseModel" in response.json()["message"]
    assert rest.get(f"/translation/engines/{engine['id']}/builds").json() == []


def test_node_with_bad_token_is_refused(deployment: Deployment) -> None:
    node = subprocess.run(
        [sys.executable, "-m", "serval_cli", "node", "--home", str(deployment.home),
         "--api-address", f"127.0.0.1:{deployment.grpc_port}", "--token", "node_wrong"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert node.returncode == 2
    assert "REJECTION_REASON_BAD_TOKEN" in node.stderr
