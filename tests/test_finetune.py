"""Training builds without the API service: real fine-tuning of the session's tiny base model."""

from __future__ import annotations

import json
from pathlib import Path

import ctranslate2
import pytest

from build_jobs.base_model.tiny import EOS_ID, augmented_source, encode_pairs
from build_jobs.data import Corpus, CorpusError, source_key
from build_jobs.nmt.evaluation import NllbTranslator
from build_jobs.nmt.pretranslation import pretranslate_revision
from build_jobs.nmt.train_build import TrainedRevision, retrieve_matches, train_revision
from build_jobs.progress import Canceled
from serval_common.build_options import BuildOptionsError, NmtBuildOptions
from serval_common.fuzzy_memory import MEMORY_FILE, TranslationMemory
from serval_common.manifest import read_manifest
from serval_common.nllb_tokenizer import EncodedSource
from serval_common.store import ModelStore, open_store
from tests.helpers import publish_tiny_base_model, verse_pairs

# The tiny base model trained on the first 300 verses; these come after them.
FIRST_UNSEEN, LAST_UNSEEN = 300, 700


@pytest.fixture
def store(tmp_path: Path, tiny_ct2_model: Path) -> ModelStore:
    store = open_store((tmp_path / "store").as_uri())
    publish_tiny_base_model(store, tiny_ct2_model, "tiny")
    return store


def write_corpus(store: ModelStore, build_id: str, sources: list[str], targets: list[str]) -> None:
    store.write_bytes(f"builds/{build_id}/train.src.txt", "".join(f"{s}\n" for s in sources).encode())
    store.write_bytes(f"builds/{build_id}/train.trg.txt", "".join(f"{t}\n" for t in targets).encode())


def train(store: ModelStore, target: str = "swh_Latn", **options: object) -> TrainedRevision:
    return train_revision(
        store,
        engine_id="e1",
        revision=1,
        build_id="b1",
        base_model="tiny",
        source_language="eng_Latn",
        target_language=target,
        options=NmtBuildOptions.model_validate(options),
    )


def test_fine_tuning_raises_chrf_and_publishes_a_loadable_revision(store: ModelStore, tmp_path: Path) -> None:
    sources, targets = verse_pairs("engwebp", "swh1850", LAST_UNSEEN)
    write_corpus(store, "b1", sources[FIRST_UNSEEN:], targets[FIRST_UNSEEN:])
    trained = train(store, maxSteps=150, evalShare=0.1)

    assert (trained.train_pairs, trained.eval_pairs, trained.steps) == (360, 40, 150)
    folder = tmp_path / "store" / "models" / "e1" / "1"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["scores"]) == {"chrf_before", "chrf_after", "bleu_before", "bleu_after"}
    assert manifest["scores"]["chrf_after"] > manifest["scores"]["chrf_before"], manifest["scores"]
    assert manifest["base_model"] == "tiny" and manifest["weights_from"] is None
    assert manifest["added_language_codes"] == []
    paths = {f["path"] for f in manifest["files"]}
    assert {"model.bin", "sentencepiece.bpe.model", "hf/config.json", "hf/sentencepiece.bpe.model"} <= paths
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    result = translator.translate_batch([["eng_Latn", "▁the", "</s>"]], target_prefix=[["swh_Latn"]])
    assert result[0].hypotheses[0][0] == "swh_Latn"


def test_a_language_nllb_lacks_is_added(store: ModelStore, tmp_path: Path) -> None:
    sources, targets = verse_pairs("engwebp", "quctt", 200)
    write_corpus(store, "b1", sources, targets)
    trained = train(store, "quc_Latn", maxSteps=40)

    assert trained.manifest.added_language_codes == ["quc_Latn"]
    assert "quc_Latn" in trained.manifest.languages
    folder = tmp_path / "store" / "models" / "e1" / "1"
    vocabulary = json.loads((folder / "shared_vocabulary.json").read_text())
    assert vocabulary[-1] == "quc_Latn"
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    result = translator.translate_batch(
        [["eng_Latn", "▁the", "</s>"]], target_prefix=[["quc_Latn"]], max_decoding_length=20
    )
    hypothesis = result[0].hypotheses[0]
    assert hypothesis[0] == "quc_Latn" and len(hypothesis) > 1


def test_time_budget_stops_early_and_still_publishes(store: ModelStore, tmp_path: Path) -> None:
    """…and, fuzzy matches being on by default, publishes a revision that reads them, with the
    memory of every pair of the build (held-out ones too), which pretranslation reads."""
    sources, targets = verse_pairs("engwebp", "swh1850", 100)
    write_corpus(store, "b1", sources, targets)
    trained = train(store, maxSteps=100_000, timeBudgetS=3)

    assert 0 < trained.steps < 100_000
    folder = tmp_path / "store" / "models" / "e1" / "1"
    assert (folder / "manifest.json").is_file()
    manifest = read_manifest(store, "models/e1/1")
    assert manifest.input_format == "fuzzy-match" and manifest.learns_segments
    memory = TranslationMemory.read(folder / MEMORY_FILE)
    assert sorted(memory.pairs()) == sorted(zip(sources, targets, strict=True)), "every pair"
    assert MEMORY_FILE in {f.path for f in manifest.files}, "listed, so nodes fetch and verify it"

    unseen = "Blessed are the humble, for they shall inherit the earth."
    match = memory.best(unseen)
    assert match is not None, "a verse with a match in the memory"
    store.write_bytes(source_key("b2"), json.dumps([{"textId": "MAT", "translation": unseen}]).encode())
    [row] = pretranslate_revision(
        store, engine_id="e1", revision=1, build_id="b2", source_code="eng_Latn", target_code="swh_Latn",
        beams=2, batch_size=8,
    )  # fmt: skip
    [expected] = NllbTranslator(folder).translate(
        [unseen],
        "eng_Latn",
        "swh_Latn",
        beam_size=2,
        max_batch_size=8,
        max_length=255,
        matches=[match.target],
    )
    assert row["translation"] == expected.text, "pretranslation reads the match from the revision's memory"


def test_without_fuzzy_matches_the_revision_is_plain(store: ModelStore, tmp_path: Path) -> None:
    sources, targets = verse_pairs("engwebp", "swh1850", 40)
    write_corpus(store, "b1", sources, targets)
    trained = train(store, maxSteps=2, fuzzyMatches=False)

    assert trained.steps == 2 and trained.manifest.input_format == "plain"
    assert not trained.manifest.learns_segments
    assert MEMORY_FILE not in {f.path for f in trained.manifest.files}
    assert not (tmp_path / "store" / "models" / "e1" / "1" / MEMORY_FILE).exists()


class WordTokenizer:
    """A stand-in for the NLLB tokenizer: every word its own id, counted from 10."""

    def __init__(self) -> None:
        self.vocabulary = {"eng_Latn": 3, "swh_Latn": 4}

    def get_vocab(self) -> dict[str, int]:
        return self.vocabulary

    def __call__(self, texts: list[str], add_special_tokens: bool) -> dict[str, list[list[int]]]:
        assert not add_special_tokens
        return {"input_ids": [[self.vocabulary.setdefault(w, len(self.vocabulary) + 10) for w in t.split()]
                              for t in texts]}  # fmt: skip


def test_augmented_examples_follow_the_nodes_layout_and_truncation() -> None:
    tokenizer = WordTokenizer()
    pairs = [("a b c", "x y"), ("d e", "z"), ("f g h i j k", "w"), ("l m", "v")]
    matches = ["p q r s o", None, "t u", ""]
    examples = encode_pairs(tokenizer, pairs, "eng_Latn", "swh_Latn", 10, matches)  # type: ignore[arg-type]
    ids = tokenizer.vocabulary
    a, b, c, x, y, p, q, r, s = (ids[w] for w in "abcxypqrs")
    src, tgt = ids["eng_Latn"], ids["swh_Latn"]

    assert [(e.source_ids, e.label_ids) for e in examples[:2]] == [
        ([src, a, b, c, EOS_ID], [tgt, x, y, EOS_ID]),
        ([src, a, b, c, tgt, p, q, r, s, EOS_ID], [tgt, x, y, EOS_ID]),
    ], "the plain example, then the source, the target code and the match, cut to 10 ids"
    assert len(examples) == 6, "one example without a match, or with an empty one"
    six = [ids[w] for w in "fghijk"]
    assert [e.source_ids for e in examples[3:5]] == [
        [src, *six, EOS_ID],
        [src, *six, tgt, ids["t"], EOS_ID],
    ], "room for one id of the match"
    assert examples[5].source_ids == [src, ids["l"], ids["m"], EOS_ID]
    long_pair = [("a b c d e f g h i j k", "x")]
    long_source = encode_pairs(tokenizer, long_pair, "eng_Latn", "swh_Latn", 10, ["p"])  # type: ignore[arg-type]
    assert [e.source_ids for e in long_source] == [[src, *(ids[w] for w in "abcdefgh"), EOS_ID]], (
        "the plain source cut to 8 ids, as before; no room for a match"
    )
    plain = encode_pairs(tokenizer, pairs, "eng_Latn", "swh_Latn", 10)  # type: ignore[arg-type]
    assert plain == [examples[i] for i in (0, 2, 3, 5)], "without matches: the plain examples alone"

    # The node's rule (EncodedSource.with_match) on the same pieces, source lengths 1 to 8.
    for length in range(1, 9):
        source = [str(n) for n in range(100, 100 + length)]
        encoded = EncodedSource("s", "eng_Latn", [], source, [])
        served = encoded.with_match(["7", "8", "9"], "swh_Latn", 10)
        trained = augmented_source(3, [int(n) for n in source], 4, [7, 8, 9], 10)
        if served is encoded:
            assert trained is None, length
        else:
            as_ids = {"eng_Latn": 3, "swh_Latn": 4, "</s>": EOS_ID}
            assert trained == [as_ids.get(t) or int(t) for t in served.tokens], length


def test_a_training_pair_is_never_its_own_match() -> None:
    train_pairs = [
        ("the king went to the city", "A"),
        ("the king went to the house", "B"),
        ("a woman sat by the well", "C"),
        ("in the beginning was the word", "D"),
    ]
    held_out = [("the king went to the city", "E"), ("nothing alike at all here", "F")]
    matches = retrieve_matches(Corpus(train=train_pairs, evaluation=held_out, dropped=0))

    assert matches.train == ["B", "A", None, None], "each its closest other pair; none for itself"
    assert matches.evaluation == ["A", None], "a held-out source gets the training pair it equals"
    assert matches.describe() == "fuzzy matches for 2 of 4 training pairs and 1 of 2 held out"


def test_misaligned_and_empty_corpora_fault_with_their_messages(store: ModelStore) -> None:
    write_corpus(store, "b1", ["one", "two", "three"], ["moja", "mbili"])
    with pytest.raises(CorpusError, match="misaligned corpus: 3 source lines vs 2 target lines"):
        train(store)
    write_corpus(store, "b1", ["one", ""], ["", "mbili"])
    with pytest.raises(CorpusError, match="empty corpus"):
        train(store)


def test_cancel_publishes_nothing(store: ModelStore, tmp_path: Path) -> None:
    sources, targets = verse_pairs("engwebp", "swh1850", 100)
    write_corpus(store, "b1", sources, targets)
    calls = 0

    def should_cancel() -> bool:
        nonlocal calls
        calls += 1
        return calls > 5

    with pytest.raises(Canceled):
        train_revision(
            store,
            engine_id="e1",
            revision=1,
            build_id="b1",
            base_model="tiny",
            source_language="eng_Latn",
            target_language="swh_Latn",
            options=NmtBuildOptions(),
            should_cancel=should_cancel,
        )
    assert not (tmp_path / "store" / "models").exists() or not any((tmp_path / "store" / "models").rglob("*"))


def test_options_are_checked() -> None:
    options = NmtBuildOptions.parse('{"maxSteps": 60, "learningRate": 0.0005, "evalShare": 0.1}')
    assert (options.max_steps, options.learning_rate, options.eval_share) == (60, 0.0005, 0.1)
    assert (options.batch_size, options.quantization, options.time_budget_s) == (16, "int8", 1800)
    with pytest.raises(BuildOptionsError, match="maxSteps"):
        NmtBuildOptions.parse('{"maxSteps": 0}')
    with pytest.raises(BuildOptionsError, match="maxSteps"):
        NmtBuildOptions.parse('{"maxSteps": "many"}')
    unknown = '{"epochs": 3, "max_steps": 9, "use_key_terms": false}'
    assert NmtBuildOptions.parse(unknown).max_steps == 9, "a Python name is a known key too"
    assert NmtBuildOptions.ignored_keys(json.loads(unknown)) == ["epochs", "use_key_terms"], (
        "keys nmt does not take are ignored, as Serval accepts any JSON object, and named"
    )


def test_sigterm_is_a_cancel_request() -> None:
    import os
    import signal

    from build_jobs.job import _sigterm_cancels

    with _sigterm_cancels() as canceled:
        assert not canceled.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert canceled.wait(5)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_learning_rate_schedules() -> None:
    from build_jobs.nmt.finetune import lr_factor

    assert [lr_factor("constant", 0, 10)(d) for d in (0, 5, 9)] == [1.0, 1.0, 1.0]
    warm = lr_factor("linear", 4, 14)
    assert [warm(d) for d in (0, 1, 3)] == [0.25, 0.5, 1.0]
    assert (warm(4), warm(9), warm(14)) == (1.0, 0.5, 0.0)
    cosine = lr_factor("cosine", 0, 10)
    assert cosine(0) == 1.0 and abs(cosine(5) - 0.5) < 1e-9 and abs(cosine(10)) < 1e-9


def test_frozen_parts_keep_their_weights(store: ModelStore, tmp_path: Path) -> None:
    import torch
    from transformers import M2M100ForConditionalGeneration

    from build_jobs.nmt.finetune import finetune

    sources, targets = verse_pairs("engwebp", "swh1850", 340)
    hf_dir = tmp_path / "store" / "base-models" / "tiny" / "hf"
    out = tmp_path / "tuned"
    result = finetune(
        hf_dir,
        out,
        list(zip(sources[300:], targets[300:], strict=True)),
        "eng_Latn",
        "quc_Latn",
        max_steps=3,
        time_budget_s=60,
        lr=1e-2,
        batch_size=8,
        lr_schedule="linear",
        warmup_steps=1,
        freeze=["encoder"],
    )
    assert result.steps == 3 and result.added_language_codes == ["quc_Latn"]
    before = M2M100ForConditionalGeneration.from_pretrained(str(hf_dir)).state_dict()
    after = M2M100ForConditionalGeneration.from_pretrained(str(out)).state_dict()
    encoder = [k for k in before if k.startswith("model.encoder.layers.")]
    decoder = [k for k in before if k.startswith("model.decoder.layers.")]
    assert encoder and decoder
    assert all(torch.equal(before[k], after[k]) for k in encoder), "a frozen encoder does not move"
    assert any(not torch.equal(before[k], after[k]) for k in decoder), "the decoder trains"
    shared = "model.shared.weight"
    assert after[shared].shape[0] == before[shared].shape[0] + 1, "the new code's embedding row"
    with pytest.raises(ValueError, match="nothing to train"):
        finetune(
            hf_dir, out, [("a", "b")], "eng_Latn", "swh_Latn", max_steps=1, time_budget_s=60, lr=1e-3,
            batch_size=1, freeze=["embeddings", "encoder", "decoder"],
        )  # fmt: skip
