"""Language detection for LibreTranslate's `source: auto` and `/detect`: which package to ship.

Each candidate detector labels verses of the bundled New Testament corpus
(`../shared/data/ebible-nt`): English, Swahili, Spanish and Hausa, whole verses and their first
four words (as short as a subtitle line or a button label). A label counts as right when it maps
(through `serval_common.languages.resolve_language`) to the verse's NLLB code. K'iche' is not an
NLLB language, so it has no right answer: its rows show what each detector says instead, and how
sure it is (a detector that is confidently wrong on a language it does not know cannot be
thresholded). Speed is the mean wall time of one call, after the model is loaded; the load time is
measured once. Every detector sees all the languages it knows: the service narrows the answer to
the languages a key can translate only after ranking.

    .venv/bin/python bench/detection.py [--verses 400] [--out bench/results/detection.json]

Candidates: `py3langid` (the service's choice, in the `api` extra), and, when installed,
`lingua-language-detector` and `cld3-py` (`pip install lingua-language-detector cld3-py`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from serval_common.languages import resolve_language  # noqa: E402
from tests.corpus import EBIBLE  # noqa: E402

CORPUS = EBIBLE
LANGUAGES = {"engwebp": "eng_Latn", "swh1850": "swh_Latn", "spaRV1909": "spa_Latn", "hauulb": "hau_Latn"}
UNKNOWN = {"quctt": "K'iche' (quc)"}
SHORT_WORDS = 4

Detect = Callable[[str], tuple[str, float]]
"""A text → (the detector's own label, its confidence 0–1)."""


@dataclass
class Row:
    detector: str
    load_s: float
    mean_call_us: float
    accuracy: dict[str, float] = field(default_factory=dict)
    short_accuracy: dict[str, float] = field(default_factory=dict)
    unknown: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def overall(self) -> float:
        return statistics.mean(self.accuracy.values())

    @property
    def overall_short(self) -> float:
        return statistics.mean(self.short_accuracy.values())


def _py3langid() -> Detect:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)

    def detect(text: str) -> tuple[str, float]:
        label, confidence = identifier.classify(text)
        return str(label), float(confidence)

    return detect


def _lingua() -> Detect:
    from lingua import LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()

    def detect(text: str) -> tuple[str, float]:
        values = detector.compute_language_confidence_values(text)
        if not values:
            return "und", 0.0
        best = values[0]
        return best.language.iso_code_639_3.name.lower(), float(best.value)

    return detect


def _cld3() -> Detect:
    import gcld3

    identifier = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=1000)

    def detect(text: str) -> tuple[str, float]:
        result = identifier.FindLanguage(text)
        return str(result.language), float(result.probability)

    return detect


DETECTORS: dict[str, Callable[[], Detect]] = {
    "py3langid": _py3langid,
    "lingua-language-detector": _lingua,
    "cld3-py": _cld3,
}


def nllb_code(label: str) -> str | None:
    try:
        return resolve_language(label).code
    except ValueError:
        return None


def verses(name: str, count: int) -> list[str]:
    lines = [
        line.strip()
        for line in (CORPUS / f"{name}.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and line.strip() != "<range>"
    ]
    step = max(1, len(lines) // count)
    return lines[::step][:count]


def short(text: str) -> str:
    return " ".join(text.split()[:SHORT_WORDS])


def measure(name: str, make: Callable[[], Detect], count: int) -> Row:
    started = time.perf_counter()
    detect = make()
    load_s = time.perf_counter() - started
    row = Row(name, round(load_s, 3), 0.0)
    call_s: list[float] = []
    for corpus, expected in LANGUAGES.items():
        texts = verses(corpus, count)
        for scores, pieces in ((row.accuracy, texts), (row.short_accuracy, [short(t) for t in texts])):
            right = 0
            for text in pieces:
                started = time.perf_counter()
                label, _ = detect(text)
                call_s.append(time.perf_counter() - started)
                right += nllb_code(label) == expected
            scores[expected] = round(100 * right / len(pieces), 1)
    for corpus, language in UNKNOWN.items():
        answers = [detect(text) for text in verses(corpus, count)]
        labels = Counter(label for label, _ in answers)
        row.unknown[language] = {
            "labels": dict(labels.most_common(3)),
            "mean_confidence": round(statistics.mean(c for _, c in answers), 3),
        }
    row.mean_call_us = round(1e6 * statistics.mean(call_s), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verses", type=int, default=400, help="verses per language")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "detection.json")
    args = parser.parse_args()
    if not CORPUS.is_dir():
        raise SystemExit(f"the shared corpus is missing: expected {CORPUS}")
    rows = []
    for name, make in DETECTORS.items():
        try:
            rows.append(measure(name, make, args.verses))
        except ImportError as error:
            print(f"{name}: not installed ({error.name}); skipped")
    header = ["detector", "load s", "µs/call", *LANGUAGES.values(), "all", "short: all", "K'iche' →"]
    print(" | ".join(header))
    for row in rows:
        unknown = next(iter(row.unknown.values()))
        print(
            " | ".join(
                [
                    row.detector,
                    f"{row.load_s:.2f}",
                    f"{row.mean_call_us:.0f}",
                    *(f"{row.accuracy[c]:.1f}% / {row.short_accuracy[c]:.1f}%" for c in LANGUAGES.values()),
                    f"{row.overall:.1f}%",
                    f"{row.overall_short:.1f}%",
                    f"{unknown['labels']} (mean confidence {unknown['mean_confidence']})",
                ]
            )
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"verses_per_language": args.verses, "rows": [asdict(r) for r in rows]}, indent=2) + "\n"
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
