"""Checking a Hugging Face NLLB-200 checkpoint folder before it becomes a base model.

`serval admin base-model import` stores nothing until everything a build and a node will read has
been checked here: the folder, `config.json` (an NLLB/M2M100 model), the weights, the tokenizer
(NLLB's id layout, the language codes it knows, `<mask>` last), and a SentencePiece model that
splits text exactly as the tokenizer does (nodes tokenize with SentencePiece, fine-tunes with the
transformers tokenizer). A checkpoint saved by transformers 5 has no `sentencepiece.bpe.model`:
it is derived from `tokenizer.json`, and kept only when it splits text as the tokenizer does.

What fails is a `CheckpointRefused`, whose message is one sentence that says what to fix.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from build_jobs.base_model.tokenizer import (
    SENTENCEPIECE_MODEL,
    SPECIAL_TOKENS,
    TOKENIZER_JSON,
    TokenizerProblem,
    load_nllb_tokenizer,
    saved_token_ids,
    tokenizer_languages,
)

if TYPE_CHECKING:
    from transformers import NllbTokenizer

ARCHITECTURE = "M2M100ForConditionalGeneration"
MODEL_TYPE = "m2m_100"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = (TOKENIZER_JSON, "tokenizer_config.json", "special_tokens_map.json", SENTENCEPIECE_MODEL)
"""Written afresh into the staged folder from the checked tokenizer, never linked from the original."""

SAMPLE_TEXT = (
    "In the beginning was the Word, and the Word was with God.",
    "Hapo mwanzo kulikuwako Neno, naye Neno alikuwako kwa Mungu.",
    "Au commencement était la Parole, et la Parole était avec Dieu.",
    "Am Anfang war das Wort, und das Wort war bei Gott.",
    "En el principio era el Verbo, y el Verbo era con Dios.",
    "В начале было Слово, и Слово было у Бога.",
    "太初有道，道与神同在，道就是神。",
    "ในปฐมกาลพระวาทะทรงดำรงอยู่",
    "Digits 12,345.67, ‘quotes’, «guillemets» — dashes… and (brackets)!",
)
SAMPLE_PIECES = 4000
"""How many of the vocabulary's pieces (spread over it) the SentencePiece comparison also splits."""


class CheckpointRefused(ValueError):
    """The folder cannot become a base model; the message is one sentence that says what to fix."""


@dataclass(frozen=True)
class CheckedCheckpoint:
    hf_dir: Path
    """The staged folder to convert and to publish under `hf/`: the original's files (linked) with
    the checked tokenizer written afresh and a SentencePiece model (the original's, or derived)."""
    languages: list[str]
    """The language codes the tokenizer knows, in id order."""
    derived_sentencepiece: bool


def check_checkpoint(hf_dir: Path, stage_dir: Path) -> CheckedCheckpoint:
    """Check `hf_dir` and stage it into `stage_dir` (absent or empty). Raises `CheckpointRefused`."""
    config = _check_config(hf_dir)
    _check_weights(hf_dir)
    has_json = (hf_dir / TOKENIZER_JSON).is_file()
    has_sentencepiece = (hf_dir / SENTENCEPIECE_MODEL).is_file()
    if not has_json and not has_sentencepiece:
        raise CheckpointRefused(
            f"{hf_dir} has no tokenizer ({TOKENIZER_JSON} or {SENTENCEPIECE_MODEL}); copy the tokenizer "
            "files of the checkpoint (tokenizer.json, tokenizer_config.json) into the folder."
        )
    tokenizer = _load_tokenizer(hf_dir)
    if not has_json:
        _check_saved_ids(hf_dir, tokenizer)
    languages = tokenizer_languages(tokenizer)
    if not languages:
        raise CheckpointRefused(
            f"the tokenizer in {hf_dir} knows no language code (such as eng_Latn); an NLLB checkpoint's "
            "tokenizer lists its FLORES-200 codes, so use the tokenizer the checkpoint was trained with."
        )
    rows = config.get("vocab_size")
    if isinstance(rows, int) and len(tokenizer) > rows:
        raise CheckpointRefused(
            f"the tokenizer has {len(tokenizer)} tokens but the model only {rows} embedding rows "
            f"(vocab_size in config.json); use the tokenizer the checkpoint was trained with."
        )
    stage_dir.mkdir(parents=True, exist_ok=True)
    if any(stage_dir.iterdir()):
        raise FileExistsError(f"{stage_dir} already exists and is not empty")
    for source in sorted(hf_dir.iterdir()):
        if source.is_file() and not source.name.startswith(".") and source.name not in TOKENIZER_FILES:
            (stage_dir / source.name).symlink_to(source.resolve())
    tokenizer.save_pretrained(str(stage_dir))
    sentencepiece_model = stage_dir / SENTENCEPIECE_MODEL
    if has_sentencepiece:
        shutil.copyfile(hf_dir / SENTENCEPIECE_MODEL, sentencepiece_model)
    else:
        sentencepiece_model.write_bytes(derive_sentencepiece(stage_dir / TOKENIZER_JSON))
    _check_sentencepiece_agrees(sentencepiece_model, tokenizer, derived=not has_sentencepiece)
    return CheckedCheckpoint(stage_dir, languages, derived_sentencepiece=not has_sentencepiece)


def check_converted_vocabulary(ct2_dir: Path, hf_dir: Path, languages: list[str]) -> None:
    """The converted model's vocabulary (what a node reads) has every language code and `<mask>`
    at the tokenizer's ids."""
    path = ct2_dir / "shared_vocabulary.json"
    if not path.is_file():
        raise CheckpointRefused(f"the converted model has no {path.name}; report this as a bug.")
    vocabulary = json.loads(path.read_text(encoding="utf-8"))
    tokenizer = load_nllb_tokenizer(hf_dir)
    for token in [*SPECIAL_TOKENS, *languages, "<mask>"]:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if not (isinstance(token_id, int) and token_id < len(vocabulary) and vocabulary[token_id] == token):
            raise CheckpointRefused(
                f"the converted model's vocabulary does not have {token} at id {token_id} as the tokenizer "
                "does; report this as a bug with the checkpoint's tokenizer files."
            )


def _check_config(hf_dir: Path) -> dict[str, Any]:
    if not hf_dir.exists():
        raise CheckpointRefused(
            f"{hf_dir} does not exist; give the folder that holds the checkpoint's config.json."
        )
    if not hf_dir.is_dir():
        raise CheckpointRefused(
            f"{hf_dir} is not a folder; give the folder that holds the checkpoint's config.json."
        )
    path = hf_dir / "config.json"
    if not path.is_file():
        raise CheckpointRefused(
            f"{hf_dir} has no config.json; give the folder of a Hugging Face NLLB-200 checkpoint "
            "(where config.json, the weights and the tokenizer files are)."
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointRefused(f"{path} is not valid JSON ({exc}); download the checkpoint again.") from None
    if not isinstance(config, dict):
        raise CheckpointRefused(f"{path} is not a model configuration; download the checkpoint again.")
    architectures = config.get("architectures") or []
    if config.get("model_type") != MODEL_TYPE or (architectures and ARCHITECTURE not in architectures):
        found = config.get("model_type") or "no model_type"
        raise CheckpointRefused(
            f"{hf_dir} holds a {found} model ({', '.join(map(str, architectures)) or 'no architecture'}), "
            f"not NLLB-200's {ARCHITECTURE}; import an NLLB-200 (M2M100) checkpoint."
        )
    return config


def _check_weights(hf_dir: Path) -> None:
    if not any((hf_dir / name).is_file() for name in WEIGHT_FILES):
        raise CheckpointRefused(
            f"{hf_dir} has no model weights (model.safetensors or pytorch_model.bin); "
            "copy the weights of the checkpoint into the folder."
        )


def _load_tokenizer(hf_dir: Path) -> NllbTokenizer:
    try:
        return load_nllb_tokenizer(hf_dir)
    except TokenizerProblem as exc:
        raise CheckpointRefused(f"{hf_dir}: {exc}") from None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise CheckpointRefused(
            f"the tokenizer in {hf_dir} cannot be read ({_first_line(exc)}); "
            "copy the checkpoint's tokenizer files again."
        ) from None


def _check_saved_ids(hf_dir: Path, tokenizer: NllbTokenizer) -> None:
    """A SentencePiece-only folder gets NLLB's layout from `load_nllb_tokenizer`: where its
    `tokenizer_config.json` records other ids (transformers 4's `added_tokens_decoder`), the model
    was trained with those, and the checkpoint is refused."""
    for token, saved_id in saved_token_ids(hf_dir).items():
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id != saved_id:
            raise CheckpointRefused(
                f"tokenizer_config.json in {hf_dir} puts {token} at id {saved_id}, but NLLB's layout puts it "
                f"at {token_id} (<mask> last, after the language codes); use the tokenizer the checkpoint "
                "was trained with."
            )


def derive_sentencepiece(tokenizer_json: Path) -> bytes:
    """A SentencePiece BPE model with the pieces of `tokenizer.json` (a BPE tokenizer converted
    from SentencePiece, as NLLB's is): SentencePiece's pieces in id order, each scored by its
    place as SentencePiece's BPE trainer scores them, with the same normalization."""
    from sentencepiece import sentencepiece_model_pb2

    model_pb2: Any = sentencepiece_model_pb2  # generated protobuf code, without type information

    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise CheckpointRefused(
            f"{tokenizer_json} is a {model.get('type') or 'unknown'} tokenizer, not NLLB's BPE, and the folder "
            f"has no {SENTENCEPIECE_MODEL}; copy sentencepiece.bpe.model from the checkpoint's original download."
        )
    added = {entry.get("content") for entry in spec.get("added_tokens") or [] if isinstance(entry, dict)}
    pieces = [
        piece
        for piece, _ in sorted(model["vocab"].items(), key=lambda item: item[1])
        if piece not in added and piece not in SPECIAL_TOKENS
    ]
    proto = model_pb2.ModelProto()
    proto.trainer_spec.model_type = model_pb2.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(pieces) + 3
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = 0, 1, 2
    proto.trainer_spec.pad_id = -1
    piece_type = model_pb2.ModelProto.SentencePiece
    proto.pieces.add(piece="<unk>", score=0.0, type=piece_type.UNKNOWN)
    for token in ("<s>", "</s>"):
        proto.pieces.add(piece=token, score=0.0, type=piece_type.CONTROL)
    for rank, piece in enumerate(pieces):
        proto.pieces.add(piece=piece, score=-float(rank), type=piece_type.NORMAL)
    charsmap = _precompiled_charsmap(spec.get("normalizer"))
    normalizer = proto.normalizer_spec
    normalizer.name = "nmt_nfkc" if charsmap else "identity"
    if charsmap:
        normalizer.precompiled_charsmap = charsmap
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = True
    normalizer.escape_whitespaces = True
    return bytes(proto.SerializeToString())


def _precompiled_charsmap(normalizer: Any) -> bytes | None:
    if not isinstance(normalizer, dict):
        return None
    if normalizer.get("type") == "Precompiled":
        return base64.b64decode(normalizer.get("precompiled_charsmap") or "")
    for inner in normalizer.get("normalizers") or []:
        found = _precompiled_charsmap(inner)
        if found:
            return found
    return None


def _check_sentencepiece_agrees(model_file: Path, tokenizer: NllbTokenizer, *, derived: bool) -> None:
    """Nodes split text with SentencePiece and fine-tunes with the tokenizer: both must give the
    same pieces, on sample sentences and on text made of the vocabulary's own pieces."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    size = processor.get_piece_size()
    step = max(1, size // SAMPLE_PIECES)
    pieces = [processor.id_to_piece(i) for i in range(3, size, step)]
    joined = (" ".join(pieces[i : i + 40]).replace("▁", " ") for i in range(0, len(pieces), 40))
    # Nodes collapse runs of spaces (Moses normalization) before SentencePiece sees the text.
    lines = [*SAMPLE_TEXT, *(re.sub(" +", " ", line).strip() for line in joined)]
    expected = tokenizer(lines, add_special_tokens=False)["input_ids"]
    for line, ids in zip(lines, expected, strict=True):
        if tokenizer.convert_tokens_to_ids(processor.encode(line, out_type=str)) != ids:
            fix = (
                f"copy {SENTENCEPIECE_MODEL} from the checkpoint's original download into the folder"
                if derived
                else f"replace {SENTENCEPIECE_MODEL} with the one the tokenizer was made from"
            )
            what = "derived from tokenizer.json" if derived else "in the folder"
            raise CheckpointRefused(
                f"the {SENTENCEPIECE_MODEL} {what} splits {line[:40]!r} differently from the tokenizer; {fix}."
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
