from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from build_jobs.base_model import (
    CheckpointRefused,
    convert_to_ctranslate2,
    import_hf_checkpoint,
    make_tiny_base_model,
)
from build_jobs.base_model.tiny import make_tiny_model
from build_jobs.base_model.tokenizer import load_nllb_tokenizer
from serval_common.languages import NLLB_LANGUAGE_CODES
from tests.helpers import EBIBLE, unavailable

DATA = EBIBLE
STEPS = 30


@dataclass(frozen=True)
class Corpus:
    english: list[str]
    swahili: list[str]


@dataclass(frozen=True)
class TinyBaseModel:
    ct2_dir: Path
    hf_dir: Path
    losses: list[float]


def _verses(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    if not DATA.is_dir():
        unavailable(f"the eBible corpus is not at {DATA}")
    pairs = [
        (e.strip(), s.strip())
        for e, s in zip(_verses("engwebp.txt"), _verses("swh1850.txt"), strict=True)
        if e.strip() not in ("", "<range>") and s.strip() not in ("", "<range>")
    ][:300]
    return Corpus([e for e, _ in pairs], [s for _, s in pairs])


@pytest.fixture(scope="module")
def tiny(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> TinyBaseModel:
    work_dir = tmp_path_factory.mktemp("tiny")
    losses: list[float] = []
    ct2_dir = make_tiny_base_model(
        work_dir,
        corpus.english,
        corpus.swahili,
        "eng_Latn",
        "swh_Latn",
        steps=STEPS,
        progress=lambda step, steps, loss: losses.append(loss),
    )
    return TinyBaseModel(ct2_dir=ct2_dir, hf_dir=work_dir / "hf", losses=losses)


def _translate(ct2_dir: Path, text: str) -> list[str]:
    import ctranslate2
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / "sentencepiece.bpe.model"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    source = ["eng_Latn", *pieces.encode(text, out_type=str), "</s>"]
    result = translator.translate_batch([source], target_prefix=[["swh_Latn"]], max_decoding_length=16)
    return result[0].hypotheses[0]


def test_ct2_model_translates_into_the_target_language(tiny: TinyBaseModel) -> None:
    hypothesis = _translate(tiny.ct2_dir, "In the beginning was the Word.")
    assert hypothesis[0] == "swh_Latn"
    assert len(hypothesis) > 1


def test_ct2_folder_holds_the_model_and_tokenizer_only(tiny: TinyBaseModel) -> None:
    assert sorted(p.name for p in tiny.ct2_dir.iterdir()) == [
        "config.json",
        "model.bin",
        "sentencepiece.bpe.model",
        "shared_vocabulary.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    vocabulary = json.loads((tiny.ct2_dir / "shared_vocabulary.json").read_text())
    assert vocabulary[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert vocabulary[-203:] == [*NLLB_LANGUAGE_CODES, "<mask>"]


def test_tokenizer_has_nllb_id_order(tiny: TinyBaseModel) -> None:
    from transformers import AutoTokenizer

    for tokenizer in (AutoTokenizer.from_pretrained(str(tiny.ct2_dir)), load_nllb_tokenizer(tiny.hf_dir)):
        assert tokenizer.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
        assert tokenizer.convert_tokens_to_ids("eng_Latn") != tokenizer.unk_token_id
        assert tokenizer.convert_tokens_to_ids("<mask>") == len(tokenizer) - 1


def test_tokenizer_splits_text_as_sentencepiece_does(tiny: TinyBaseModel, corpus: Corpus) -> None:
    """Training tokenizes with the transformers tokenizer, inference nodes with SentencePiece."""
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(tiny.hf_dir / "sentencepiece.bpe.model"))
    tokenizer = load_nllb_tokenizer(tiny.hf_dir)
    lines = corpus.english + corpus.swahili
    expected = [tokenizer.convert_tokens_to_ids(pieces.encode(line, out_type=str)) for line in lines]
    assert tokenizer(lines, add_special_tokens=False)["input_ids"] == expected


def test_training_lowers_the_loss(tiny: TinyBaseModel) -> None:
    assert len(tiny.losses) == STEPS
    assert sum(tiny.losses[-5:]) < sum(tiny.losses[:5])


def test_training_is_deterministic(corpus: Corpus, tmp_path: Path) -> None:
    runs: list[list[float]] = []
    for name in ("a", "b"):
        losses: list[float] = []
        make_tiny_model(
            tmp_path / name,
            corpus.english[:50],
            corpus.swahili[:50],
            "eng_Latn",
            "swh_Latn",
            steps=3,
            vocab_size=300,
            progress=lambda step, steps, loss, losses=losses: losses.append(loss),
        )
        runs.append(losses)
    assert runs[0] == runs[1]
    assert (tmp_path / "a/model.safetensors").read_bytes() == (tmp_path / "b/model.safetensors").read_bytes()


def test_untrained_model_converts(corpus: Corpus, tmp_path: Path) -> None:
    ct2_dir = make_tiny_base_model(
        tmp_path, corpus.english[:50], corpus.swahili[:50], "eng_Latn", "swh_Latn", steps=0
    )
    assert _translate(ct2_dir, "Jesus wept.")[0] == "swh_Latn"


def test_unknown_language_code_is_refused(corpus: Corpus, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quc_Latn"):
        make_tiny_model(tmp_path, corpus.english[:5], corpus.swahili[:5], "eng_Latn", "quc_Latn", steps=0)


def test_import_hf_checkpoint(tiny: TinyBaseModel, tmp_path: Path) -> None:
    ct2_dir = import_hf_checkpoint(tiny.hf_dir, tmp_path)
    assert ct2_dir == tmp_path / "ct2"
    assert (ct2_dir / "sentencepiece.bpe.model").is_file()
    assert _translate(ct2_dir, "Jesus wept.")[0] == "swh_Latn"


def test_import_hf_checkpoint_needs_config_and_weights(tiny: TinyBaseModel, tmp_path: Path) -> None:
    """More refusals, through the CLI: tests/test_base_model_import.py."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "sentencepiece.bpe.model").write_bytes(
        (tiny.hf_dir / "sentencepiece.bpe.model").read_bytes()
    )
    with pytest.raises(CheckpointRefused, match=r"config\.json"):
        import_hf_checkpoint(checkpoint, tmp_path / "work")
    (checkpoint / "config.json").write_text((tiny.hf_dir / "config.json").read_text())
    with pytest.raises(CheckpointRefused, match=r"model\.safetensors"):
        import_hf_checkpoint(checkpoint, tmp_path / "work")


def test_convert_refuses_a_folder_with_files(tiny: TinyBaseModel, tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("not ours")
    with pytest.raises(FileExistsError):
        convert_to_ctranslate2(tiny.hf_dir, tmp_path)
    assert (tmp_path / "keep.txt").is_file()


def test_convert_accepts_an_empty_folder(tiny: TinyBaseModel, tmp_path: Path) -> None:
    out_dir = tmp_path / "empty"
    out_dir.mkdir()
    convert_to_ctranslate2(tiny.hf_dir, out_dir, quantization=None)
    assert (out_dir / "model.bin").is_file()


def test_alignment_is_the_penultimate_layer_averaged_over_heads(tiny: TinyBaseModel, tmp_path: Path) -> None:
    """CTranslate2's returned attention equals the Hugging Face model's cross-attention of the
    penultimate decoder layer averaged over its heads, for the same source and target tokens."""
    import ctranslate2
    import torch
    from transformers import M2M100ForConditionalGeneration

    ct2_dir = convert_to_ctranslate2(tiny.hf_dir, tmp_path / "ct2", quantization=None)
    tokenizer = load_nllb_tokenizer(tiny.hf_dir)
    source = ["eng_Latn", *tokenizer.tokenize("In the beginning was the Word."), "</s>"]
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu")
    result = translator.translate_batch(
        [source], target_prefix=[["swh_Latn"]], beam_size=1, return_attention=True, max_decoding_length=8
    )[0]
    target = result.hypotheses[0]
    ct2_attention = torch.tensor(result.attention[0])

    model = M2M100ForConditionalGeneration.from_pretrained(str(tiny.hf_dir), attn_implementation="eager")
    ids = tokenizer.convert_tokens_to_ids
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([ids(source)]),
            decoder_input_ids=torch.tensor([ids(["</s>", *target])]),
            output_attentions=True,
        )
    assert len(out.cross_attentions) >= 2
    expected = out.cross_attentions[-2][0].mean(dim=0)[1 : 1 + len(ct2_attention)]
    last_head0 = out.cross_attentions[-1][0][0][1 : 1 + len(ct2_attention)]
    assert torch.allclose(ct2_attention, expected, atol=1e-3)
    assert not torch.allclose(ct2_attention, last_head0, atol=1e-3), "not CTranslate2's default"
