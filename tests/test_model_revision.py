"""A model revision's identity: its store key, and the weights a node loads for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from serval.inference.v1 import node_pb2
from serval_api.routing.held import HeldModels
from serval_common.manifest import Manifest, ResolvedRevision, publish_folder, resolve_revision
from serval_common.model_revision import ModelRevision, short_weights
from serval_common.names import InvalidName
from serval_common.store import open_store
from serval_common.thot_smt import BACKEND as THOT_SMT
from tests.helpers import distinct_weights

READY, LOADING = node_pb2.MODEL_STATE_READY, node_pb2.MODEL_STATE_LOADING


def test_a_revision_is_one_key_built_and_parsed_in_one_place() -> None:
    revision = ModelRevision("e1", 3, "w-abc")
    assert revision.location == "models/e1/3" == str(revision)
    assert ModelRevision.parse("models/e1/3") == revision, "weights take no part in equality"
    assert ModelRevision.parse("models/e1/3", "w-x").weights == "w-x"
    for other in ("models/e1", "models//3", "models/e1/x", "base-models/e1/3", "models/e1/3/x"):
        assert ModelRevision.parse(other) is None
    with pytest.raises(InvalidName):
        ModelRevision("../x", 1).checked_location()


def revision_manifest(engine: str, **fields: object) -> Manifest:
    return Manifest(kind="model-revision", engine_id=engine, revision=1, **fields)  # type: ignore[arg-type]


def test_weights_are_what_a_node_loads_wherever_they_are_stored(tmp_path: Path, tiny_ct2_model: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    publish_folder(store, "base-models/tiny", tiny_ct2_model, Manifest(kind="base-model", name="tiny"))
    for engine in ("a", "b"):
        publish_folder(
            store, f"models/{engine}/1", None, revision_manifest(engine, weights_from="base-models/tiny")
        )
    publish_folder(store, "models/copy/1", tiny_ct2_model, revision_manifest("copy"))
    publish_folder(
        store, "models/tuned/1", distinct_weights(tiny_ct2_model, "tuned"), revision_manifest("tuned")
    )
    weights = {
        name: resolve_revision(store, f"models/{name}/1").weights for name in ("a", "b", "copy", "tuned")
    }
    assert weights["a"] == weights["b"], "two inference-only revisions of one base model share weights"
    assert weights["copy"] == weights["a"], "byte-identical weights are shared wherever they are stored"
    assert weights["tuned"] != weights["a"], "different files, different weights"
    assert all(w.startswith("w-") and len(w) == 34 for w in weights.values())
    assert short_weights(weights["a"]) == weights["a"][:14]


def weights_identity(location: str, manifest: Manifest) -> str:
    """The weights of a revision at `location` that holds its own files."""
    return ResolvedRevision(location, manifest, location, manifest).weights


def test_a_training_checkpoint_is_not_part_of_the_weights_and_learning_models_are_their_own() -> None:
    model = {"path": "model.bin", "sha256": "1" * 64, "size": 3}
    checkpoint = {"path": "hf/model.safetensors", "sha256": "2" * 64, "size": 9}
    served = Manifest.model_validate({"kind": "model-revision", "files": [model]})
    trained = Manifest.model_validate({"kind": "model-revision", "files": [model, checkpoint]})
    assert weights_identity("models/a/1", served) == weights_identity("models/b/1", trained)
    smt = Manifest.model_validate({"kind": "model-revision", "files": [model], "backend": THOT_SMT})
    assert weights_identity("models/a/1", smt) == "models/a/1", "smt-transfer models learn per engine"
    assert weights_identity("models/b/1", smt) == "models/b/1"


def test_held_models_count_each_set_of_weights_once() -> None:
    held = HeldModels()
    held.set("models/a/1", READY, "w-1", 100)
    held.set("models/b/1", READY, "w-1", 100)
    held.set("models/c/2", LOADING, "w-2")
    assert held.serves(ModelRevision("new", 1, "w-1")) == READY, "its weights are loaded: no load needed"
    assert held.serves(ModelRevision("new", 1, "w-2")) == LOADING
    assert held.serves(ModelRevision("new", 1, "w-3")) == node_pb2.MODEL_STATE_UNSPECIFIED
    assert held.serves(ModelRevision("new", 1)) == node_pb2.MODEL_STATE_UNSPECIFIED, (
        "unknown weights: no guess"
    )
    assert len(held) == 2 and held.bytes_held() == 100
    [first, second] = held.loaded()
    assert (first.weights, first.state, first.size_bytes) == ("w-1", READY, 100)
    assert [a.engine_id for a in first.aliases] == ["a", "b"] and second.state == LOADING
    held.remove("models/a/1")
    assert held.serves(ModelRevision("new", 1, "w-1")) == READY and held.bytes_held() == 100
    held.set("models/b/1", node_pb2.MODEL_STATE_UNLOADED)
    assert held.serves(ModelRevision("new", 1, "w-1")) == node_pb2.MODEL_STATE_UNSPECIFIED
    assert held.bytes_held() == 0 and [r.location for r in held.revisions()] == ["models/c/2"]
