"""`serval admin base-model import` as an administrator runs it on checkpoints saved by transformers
4 and 5: good ones are stored with the languages their tokenizer knows, each bad kind is refused
with one sentence and nothing is stored, and a fine-tune works on a tokenizer with three languages."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import ctranslate2
import pytest
from typer.testing import CliRunner

from build_jobs.nmt.train_build import train_revision
from serval_cli.main import app
from serval_common.build_options import NmtBuildOptions
from serval_common.languages import NLLB_LANGUAGE_CODES
from serval_common.manifest import read_manifest
from serval_common.store import open_store
from tests.helpers import verse_pairs
from tests.nllb_checkpoints import THREE_LANGUAGES, Saved, make_checkpoint, train_pieces

runner = CliRunner()
NLLB_600M_ROWS = 256_206
"""The embedding rows of nllb-200-distilled-600M's config.json (bench/models.py's VOCAB_SIZE)."""


@pytest.fixture(scope="module")
def pieces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_pieces(tmp_path_factory.mktemp("pieces"))


def import_folder(folder: Path, store: Path, name: str = "real", *options: str) -> tuple[int, str]:
    result = runner.invoke(
        app,
        [
            "admin",
            "base-model",
            "import",
            str(folder),
            "--name",
            name,
            "--store-url",
            store.as_uri(),
            *options,
        ],
        catch_exceptions=False,
    )
    return result.exit_code, result.output


@pytest.mark.parametrize("saved", ["fast", "slow", "both"])
@pytest.mark.parametrize("codes", [NLLB_LANGUAGE_CODES, THREE_LANGUAGES], ids=["202", "three"])
def test_a_good_checkpoint_is_stored_with_the_languages_its_tokenizer_knows(
    pieces: Path, tmp_path: Path, saved: Saved, codes: tuple[str, ...]
) -> None:
    folder = make_checkpoint(tmp_path / "checkpoint", pieces, saved=saved, codes=codes)
    before = sorted(p.name for p in folder.iterdir())
    store = tmp_path / "store"
    rate = ("--learning-rate", "5e-05") if saved == "both" else ()
    code, output = import_folder(folder, store, "real", *rate)
    assert code == 0, output
    manifest = read_manifest(open_store(store.as_uri()), "base-models/real")
    assert manifest.languages == list(codes)
    learning_rate = manifest.training_defaults.learning_rate if manifest.training_defaults else None
    assert learning_rate == (5e-05 if rate else None), "the administrator's default fine-tunes use"
    paths = {f.path for f in manifest.files}
    # What nodes (SentencePiece, the CTranslate2 vocabulary) and fine-tunes (hf/) read.
    assert {"model.bin", "shared_vocabulary.json", "sentencepiece.bpe.model"} <= paths
    assert {"hf/config.json", "hf/tokenizer.json", "hf/sentencepiece.bpe.model"} <= paths
    assert sorted(p.name for p in folder.iterdir()) == before, "the administrator's folder is left as it was"
    vocabulary = json.loads((store / "base-models/real/shared_vocabulary.json").read_text())
    assert vocabulary[-1 - len(codes) :] == [*codes, "<mask>"]

    listed = runner.invoke(app, ["admin", "base-model", "list", "--store-url", store.as_uri()])
    assert listed.exit_code == 0, listed.output
    expected = (
        "all 202 NLLB-200 languages" if len(codes) == 202 else "3 languages: eng_Latn, swh_Latn, fra_Latn"
    )
    assert expected in listed.output


def _no_config(folder: Path) -> None:
    (folder / "config.json").unlink()


def _other_architecture(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "model_type": "t5", "architectures": ["T5Model"]})
    )


def _no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def _no_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").unlink()


def _remove_folder(folder: Path) -> None:
    shutil.rmtree(folder)


REFUSALS: list[tuple[str, Callable[[Path], None], dict[str, object], str]] = [
    ("missing folder", _remove_folder, {}, "does not exist; give the folder"),
    ("no config.json", _no_config, {}, "has no config.json; give the folder of a Hugging Face NLLB-200"),
    ("not NLLB", _other_architecture, {}, "holds a t5 model (T5Model), not NLLB-200's"),
    ("no weights", _no_weights, {}, "has no model weights (model.safetensors or pytorch_model.bin)"),
    ("no tokenizer", _no_tokenizer, {}, "has no tokenizer (tokenizer.json or sentencepiece.bpe.model)"),
    ("no language codes", lambda _: None, {"codes": ()}, "knows no language code (such as eng_Latn)"),
    ("mask misplaced", lambda _: None, {"mask_last": False}, "the tokenizer's <mask> has id 301, but NLLB's"),
    (
        "mask misplaced, slow",
        lambda _: None,
        {"mask_last": False, "saved": "slow"},
        "the tokenizer's <mask> has id 301, but NLLB's",
    ),
]


@pytest.mark.parametrize(
    ("spoil", "options", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_bad_checkpoint_is_refused_with_one_sentence_and_nothing_stored(
    pieces: Path, tmp_path: Path, spoil: Callable[[Path], None], options: dict[str, object], message: str
) -> None:
    saved = options.pop("saved", "fast")
    assert saved in ("fast", "slow", "both")
    folder = make_checkpoint(tmp_path / "checkpoint", pieces, saved=saved, **options)  # type: ignore[arg-type]
    spoil(folder)
    store = tmp_path / "store"
    code, output = import_folder(folder, store)
    assert code == 1, output
    assert message in output
    assert "Traceback" not in output
    sentence = output.strip().removeprefix("not imported:").strip()
    assert sentence.endswith(".") and sentence.count("; ") == 1, sentence
    assert not store.exists() or not any(store.rglob("*")), "nothing is stored"


@pytest.mark.parametrize(
    ("codes", "rows"),
    [(THREE_LANGUAGES, None), (NLLB_LANGUAGE_CODES, NLLB_600M_ROWS)],
    ids=["three-languages", "600m-shape-vocabulary"],
)
def test_a_fine_tune_works_on_the_imported_model(
    pieces: Path, tmp_path: Path, codes: tuple[str, ...], rows: int | None
) -> None:
    """A tokenizer that knows three languages; and the vocabulary layout of nllb-200-distilled-600M
    (and of the bench's 600M shape): 256,206 embedding rows, more than the tokenizer's tokens."""
    folder = make_checkpoint(tmp_path / "checkpoint", pieces, saved="fast", codes=codes, rows=rows)
    store_dir = tmp_path / "store"
    code, output = import_folder(folder, store_dir, "imported")
    assert code == 0, output
    store = open_store(store_dir.as_uri())
    sources, targets = verse_pairs("engwebp", "swh1850", 40)
    store.write_bytes("builds/b1/train.src.txt", "".join(f"{s}\n" for s in sources).encode())
    store.write_bytes("builds/b1/train.trg.txt", "".join(f"{t}\n" for t in targets).encode())
    trained = train_revision(
        store,
        engine_id="e1",
        revision=1,
        build_id="b1",
        base_model="imported",
        source_language="eng_Latn",
        target_language="swh_Latn",
        options=NmtBuildOptions.model_validate({"maxSteps": 3, "evalShare": 0.1}),
    )
    assert trained.steps == 3
    manifest = read_manifest(store, "models/e1/1")
    assert manifest.languages == list(codes) and manifest.added_language_codes == []
    translator = ctranslate2.Translator(str(store_dir / "models/e1/1"), device="cpu", intra_threads=1)
    result = translator.translate_batch([["eng_Latn", "▁the", "</s>"]], target_prefix=[["swh_Latn"]])
    assert result[0].hypotheses[0][0] == "swh_Latn"


def test_the_base_model_commands_name_the_store_they_use(tmp_path: Path) -> None:
    """Run from another folder, the default store is another one: every command says which."""
    store = tmp_path / "elsewhere"
    listed = runner.invoke(app, ["admin", "base-model", "list", "--store-url", store.as_uri()])
    assert listed.exit_code == 0, listed.output
    assert f"model store: {store.as_uri()} (--store-url / SERVAL_STORE__URL)" in listed.stderr
    assert "no base models in this store" in listed.stderr
    assert listed.stdout == ""
