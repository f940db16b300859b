"""Statistical word alignment with SIL's Thot toolkit (`sil-machine` + `sil-thot`): the model folder
of a `statistical` engine revision, how a build trains it and how a node loads and aligns with it.

Model folder (`models/{engineId}/{revision}/` in the model store, `backend="thot-align"`):

    alignment.json      `AlignmentSettings`: model type, symmetrization heuristic, tokenizer,
                        lowercasing, the two model prefixes, how many pairs it was trained on
    src_trg.*           Thot's files of the direct model (source → target), prefix `src_trg`
    trg_src.*           Thot's files of the inverse model (target → source), prefix `trg_src`
    manifest.json       written last by the publisher (`build_jobs.publish.publish_revision`):
                        kind "model-revision", backend "thot-align", every file above with its
                        sha256 and size, `scores` (the direction agreement of the training pairs)
                        and `training` (seconds, pairs)

Segments are tokenized with sil-machine's Latin word tokenizer; the models see lowercased tokens
(when `lowercase`), while results carry the tokens as written so a client can show them. A link's
score is its translation probability, the larger of the direct model's p(target word | source
word) and the inverse model's p(source word | target word): a probability in [0, 1].

The Thot and sil-machine imports are lazy: this module imports without the `smt` extra; calling
`train` or `ThotAligner.load` then raises ImportError.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from machine.corpora import AlignedWordPair
    from machine.translation.thot import ThotSymmetrizedWordAlignmentModel

BACKEND = "thot-align"
SETTINGS_FILE = "alignment.json"
DIRECT_PREFIX = "src_trg"
INVERSE_PREFIX = "trg_src"

ModelType = Literal["hmm", "eflomal", "fast_align", "ibm1", "ibm2"]
Heuristic = Literal[
    "grow-diag-final-and", "grow-diag-final", "grow-diag", "grow", "intersection", "union", "och", "none"
]

DEFAULT_MODEL_TYPE: ModelType = "eflomal"
DEFAULT_HEURISTIC: Heuristic = "grow-diag-final-and"


class AlignmentSettings(BaseModel):
    """`alignment.json`: what a node needs to align the way the build trained."""

    format_version: int = 1
    model_type: ModelType = DEFAULT_MODEL_TYPE
    heuristic: Heuristic = DEFAULT_HEURISTIC
    tokenizer: Literal["latin"] = "latin"
    lowercase: bool = True
    direct_prefix: str = DIRECT_PREFIX
    inverse_prefix: str = INVERSE_PREFIX
    iterations: int | None = Field(
        default=None,
        description="iterations of each model stage, eflomal's IBM1, HMM and fertility stages "
        "included (None: Thot's defaults; eflomal's scale with the corpus)",
    )
    train_pairs: int = 0


@dataclass(frozen=True)
class Link:
    source_index: int
    target_index: int
    score: float


@dataclass(frozen=True)
class Aligned:
    """One aligned sentence pair: the tokens as written and the links between them."""

    source_tokens: list[str]
    target_tokens: list[str]
    links: list[Link]


class Tokenizer:
    """sil-machine's Latin word tokenizer; `model_tokens` are what the Thot models see."""

    def __init__(self, lowercase: bool) -> None:
        from machine.tokenization import LatinWordTokenizer

        self._tokenizer = LatinWordTokenizer()
        self.lowercase = lowercase

    def tokens(self, text: str) -> list[str]:
        return list(self._tokenizer.tokenize(text.strip()))

    def model_tokens(self, tokens: Sequence[str]) -> list[str]:
        return [t.lower() for t in tokens] if self.lowercase else list(tokens)


def _new_model(settings: AlignmentSettings, folder: Path) -> ThotSymmetrizedWordAlignmentModel:
    from machine.translation import SymmetrizationHeuristic
    from machine.translation.thot import ThotSymmetrizedWordAlignmentModel, ThotWordAlignmentModelType
    from machine.translation.thot.thot_word_alignment_model_utils import create_thot_word_alignment_model

    model_type = ThotWordAlignmentModelType[settings.model_type.upper()]
    direct = create_thot_word_alignment_model(model_type, folder / settings.direct_prefix)
    inverse = create_thot_word_alignment_model(model_type, folder / settings.inverse_prefix)
    if settings.iterations is not None:
        for model in (direct, inverse):
            params = model.parameters
            params.ibm1_iteration_count = settings.iterations
            params.ibm2_iteration_count = settings.iterations
            params.hmm_iteration_count = settings.iterations
            params.fast_align_iteration_count = settings.iterations
            params.ibm3_iteration_count = settings.iterations  # eflomal's fertility stage
    for model in (direct, inverse):
        if settings.model_type == "eflomal":
            # Serial sampler chains with a fixed seed: the same corpus gives the same model.
            model.parameters.eflomal_deterministic = True
            model.parameters.eflomal_seed = 1
    symmetrized = ThotSymmetrizedWordAlignmentModel(direct, inverse)
    # sil-machine declares the setter apart from its property, which mypy reads as read-only
    symmetrized.heuristic = SymmetrizationHeuristic[settings.heuristic.upper().replace("-", "_")]  # type: ignore[misc]
    return symmetrized


@dataclass(frozen=True)
class Trained:
    settings: AlignmentSettings
    seconds: float
    agreement: float
    """Share of links the two directions agree on over the training pairs (|D ∩ I| / |D ∪ I|)."""


Progress = Callable[[float, str], None]
"""(fraction of training done, what is happening)"""


def train(
    pairs: Sequence[tuple[str, str]],
    folder: Path,
    settings: AlignmentSettings,
    *,
    progress: Progress | None = None,
    check_canceled: Callable[[], None] | None = None,
    agreement_sample: int = 500,
) -> Trained:
    """Train the direct and inverse models on `pairs` (raw text) and write the model folder.
    `check_canceled` is called between training iterations and raises to stop."""
    from machine.corpora import ParallelTextCorpus, ParallelTextRow

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(settings.lowercase)
    rows: list[Any] = []
    for n, (source, target) in enumerate(pairs, start=1):
        src = tokenizer.model_tokens(tokenizer.tokens(source))
        trg = tokenizer.model_tokens(tokenizer.tokens(target))
        if src and trg:
            rows.append(ParallelTextRow("train", [n], [n], src, trg))
    if not rows:
        raise ValueError("no training pair has words on both sides")
    settings = settings.model_copy(update={"train_pairs": len(rows)})
    began = time.monotonic()
    model = _new_model(settings, folder)
    try:
        trainer = model.create_trainer(ParallelTextCorpus.from_parallel_rows(rows))
        try:

            def report(status: Any) -> None:
                if progress is not None and status.percent_completed is not None:
                    progress(float(status.percent_completed), status.message or "training")

            trainer.train(progress=report, check_canceled=check_canceled)
            trainer.save()
        finally:
            trainer.close()
        seconds = time.monotonic() - began
        sample = [(r.source_segment, r.target_segment) for r in rows[:agreement_sample]]
        agreement = direction_agreement(model, sample)
    finally:
        model.close()
    (folder / SETTINGS_FILE).write_text(settings.model_dump_json(indent=2))
    return Trained(settings=settings, seconds=seconds, agreement=agreement)


def direction_agreement(
    model: ThotSymmetrizedWordAlignmentModel, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]
) -> float:
    """|D ∩ I| / |D ∪ I| of the direct and (transposed) inverse alignments of `pairs`: with no gold
    alignment, how far the two independently trained directions agree (1.0: always)."""
    if not pairs:
        return 0.0
    direct = model.direct_word_alignment_model.align_batch([[s, t] for s, t in pairs])
    inverse = model.inverse_word_alignment_model.align_batch([[t, s] for s, t in pairs])
    both = either = 0
    for d, i in zip(direct, inverse, strict=True):
        d_links = {(p.source_index, p.target_index) for p in d.to_aligned_word_pairs()}
        i_links = {(p.target_index, p.source_index) for p in i.to_aligned_word_pairs()}
        both += len(d_links & i_links)
        either += len(d_links | i_links)
    return both / either if either else 0.0


def read_settings(folder: Path) -> AlignmentSettings:
    return AlignmentSettings.model_validate_json((folder / SETTINGS_FILE).read_text())


class ThotAligner:
    """A loaded model folder. Thot's models are not safe to share between threads: every call
    holds the aligner's lock."""

    def __init__(
        self, folder: Path, settings: AlignmentSettings, model: ThotSymmetrizedWordAlignmentModel
    ) -> None:
        self.folder = folder
        self.settings = settings
        self._model = model
        from machine.translation.thot.thot_utils import escape_tokens

        self.tokenizer = Tokenizer(settings.lowercase)
        self._escape = escape_tokens
        self._lock = threading.Lock()

    @classmethod
    def load(cls, folder: Path) -> ThotAligner:
        settings = read_settings(folder)
        for prefix in (settings.direct_prefix, settings.inverse_prefix):
            if not (folder / f"{prefix}.src").is_file():
                raise FileNotFoundError(f"{folder} holds no Thot model {prefix!r}")
        return cls(folder, settings, _new_model(settings, folder))

    def align(self, source: str, target: str) -> Aligned:
        return self.align_many([(source, target)])[0]

    def align_many(self, pairs: Sequence[tuple[str, str]]) -> list[Aligned]:
        """Align every pair; a pair with no words on one side gets no links."""
        tokenized = [(self.tokenizer.tokens(s), self.tokenizer.tokens(t)) for s, t in pairs]
        todo = [i for i, (s, t) in enumerate(tokenized) if s and t]
        segments = [
            [self.tokenizer.model_tokens(tokenized[i][0]), self.tokenizer.model_tokens(tokenized[i][1])]
            for i in todo
        ]
        with self._lock:
            word_pairs = self._word_pairs(segments)
        links: dict[int, list[Link]] = {
            i: sorted(
                (
                    Link(wp.source_index, wp.target_index, min(1.0, max(0.0, float(wp.translation_score))))
                    for wp in found
                ),
                key=lambda link: (link.source_index, link.target_index),
            )
            for i, found in zip(todo, word_pairs, strict=True)
        }
        return [Aligned(list(s), list(t), links.get(i, [])) for i, (s, t) in enumerate(tokenized)]

    def _word_pairs(self, segments: list[list[list[str]]]) -> Sequence[Collection[AlignedWordPair]]:
        """Thot's batch call costs tens of milliseconds more than its one-pair call (it starts
        workers), so one pair goes through the one-pair call; the batch call wins from a few pairs."""
        if len(segments) != 1:
            return self._model.get_best_aligned_word_pairs_batch(segments) if segments else []
        source, target = segments[0]
        # the one-pair call, unlike the batch one, leaves Thot's token escaping to its caller
        matrix = self._model.align(list(self._escape(source)), list(self._escape(target)))
        found = matrix.to_aligned_word_pairs()
        self._model.compute_aligned_word_pair_scores(source, target, found)
        return [found]

    def close(self) -> None:
        with self._lock:
            self._model.close()


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def settings_json(settings: AlignmentSettings) -> dict[str, Any]:
    return json.loads(settings.model_dump_json())
