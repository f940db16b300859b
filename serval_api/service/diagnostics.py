"""A build's warnings and problems as Serval 1.20's structured diagnostics
(`executionData.diagnostics`: `{code, category, message, severity, data}`, severity `Info`, `Warn`
or `Error`), with `diagnosticsTruncated` when there were more than `MAX_DIAGNOSTICS`.

Codes Serval defines keep its numbers, category, severity and message (`BuildDiagnosticService`):
`CONFIG-0003` (few segments to train on), `MODEL-0001`/`MODEL-0002` (a language the base model does
not know), `MODEL-0003` (a book's pretranslations unusually unsure), `MODEL-0004` (unknown languages
and nothing to train on). This service's own start at 1001 in their category: the export's warnings
(`CONFIG-1001`, `CONFIG-1002`), what the build accepted but ignores, as Serval does (`CONFIG-1003`:
build options the engine type does not take, an engine corpus's side filters), the training
hyperparameters a fine-tune used (`CONFIG-1004`, Info), a fine-tune that lowered the held-out chrF
(`MODEL-1001`), a build job's warnings (`JOB-1001`) and a fault (`BUILD-1001`).
Every text of the older `warnings` list is also a diagnostic's message.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from serval_api.db.models.build_record import Diagnostic, ExecutionData, Severity
from serval_api.service import limits

MAX_DIAGNOSTICS = 1000
"""Serval's `BuildJobOptions.MaxDiagnostics`."""
MINIMUM_TRAIN_COUNT = 600
"""Fewer segments than this to train on is `CONFIG-0003` (Serval's `MinimumTrainCount`, about the
Gospel of Mark)."""

_RANK = {Severity.INFO.value: 0, Severity.WARN.value: 1, Severity.ERROR.value: 2}


def diagnostic(code: str, severity: Severity, message: str, data: dict[str, Any] | None = None) -> Diagnostic:
    return Diagnostic(
        code=code, category=code.split("-", 1)[0], message=message, severity=severity.value, data=data or {}
    )


def few_training_segments(train_count: int) -> Diagnostic:
    return diagnostic(
        "CONFIG-0003",
        Severity.WARN,
        f"Only {train_count} segments were selected for training. Training on fewer than "
        f"{MINIMUM_TRAIN_COUNT} segments is not recommended.",
        {"trainCount": train_count, "minimumTrainCount": MINIMUM_TRAIN_COUNT},
    )


def unknown_script(side: str, resolved_code: str, model_name: str) -> Diagnostic:
    """`side`: "source" (MODEL-0001) or "target" (MODEL-0002)."""
    return diagnostic(
        "MODEL-0001" if side == "source" else "MODEL-0002",
        Severity.WARN,
        f"The script for the {side} language ‘{resolved_code}’ is not known to the base model {model_name}.",
        {"resolvedCode": resolved_code, "modelName": model_name},
    )


def low_book_confidence(book: str, average: float, model_name: str) -> Diagnostic:
    return diagnostic(
        "MODEL-0003",
        Severity.WARN,
        f"The average pretranslation model confidence {average} in book {book} is unusually low for "
        f"the base model {model_name}.",
        {"averagePretranslationConfidence": average, "bookId": book, "modelName": model_name},
    )


def unknown_languages_untrained(tags: Sequence[str], model_name: str) -> Diagnostic:
    return diagnostic(
        "MODEL-0004",
        Severity.ERROR,
        f"The following language codes are unknown to the base model {model_name}: {', '.join(tags)}; "
        "and no language data was selected for training.",
        {"modelName": model_name, "unknownLanguageCodes": list(tags)},
    )


def corpus_language(message: str, *, corpus_ref: str, side: str, corpus_id: str, language: str) -> Diagnostic:
    """A corpus in another language than the engine's side (the export's warning `message`)."""
    data = {"parallelCorpusId": corpus_ref, "side": side, "corpusId": corpus_id, "language": language}
    return diagnostic("CONFIG-1001", Severity.WARN, message, data)


def nothing_to_train(message: str) -> Diagnostic:
    """Training asked for, but the corpora hold no parallel segments (the export's warning)."""
    return diagnostic("CONFIG-1002", Severity.WARN, message)


MAX_NAMED_IGNORED = 10
"""Ignored option keys a message names at most (the diagnostic's data lists up to 100)."""


def ignored_options(engine_type: str, keys: Sequence[str]) -> Diagnostic:
    """Build options `engine_type` does not take: the build keeps them and passes them on, as
    Serval accepts any JSON object, but nothing reads them; listed so that a misspelt option shows."""
    named = ", ".join(limits.shown(key) for key in keys[:MAX_NAMED_IGNORED])
    more = f" and {len(keys) - MAX_NAMED_IGNORED} more" if len(keys) > MAX_NAMED_IGNORED else ""
    return diagnostic(
        "CONFIG-1003",
        Severity.WARN,
        f"build options {named}{more} are not options of {engine_type} engines and were ignored; "
        "check their spelling against the engine type's build options",
        {"engineType": engine_type, "ignoredOptions": [key[:200] for key in keys[:100]]},
    )


def ignored_filters(message: str, *, field: str, corpus_id: str) -> Diagnostic:
    """An engine corpus named with `sourceFilters` / `targetFilters`, which Serval ignores there."""
    return diagnostic("CONFIG-1003", Severity.WARN, message, {"field": field, "corpusId": corpus_id})


def training_hyperparameters(description: str, data: dict[str, Any]) -> Diagnostic:
    """The hyperparameters a fine-tune used and where each came from (`data.sources`: the build's
    options, the deployment's settings, the base model's defaults or the code's)."""
    return diagnostic("CONFIG-1004", Severity.INFO, f"Fine-tuned with {description}.", data)


def worse_chrf(message: str, before: float, after: float, *, published: bool) -> Diagnostic:
    """Fine-tuning lowered the held-out chrF below the base model's (`message` says so)."""
    data = {"chrfBefore": round(before, 2), "chrfAfter": round(after, 2), "published": published}
    return diagnostic("MODEL-1001", Severity.WARN, message, data)


def job_warning(message: str) -> Diagnostic:
    """A warning the build job reported (UpdateBuildExecutionData's `warnings`)."""
    return diagnostic("JOB-1001", Severity.WARN, message)


def build_fault(message: str) -> Diagnostic:
    """Why the build faulted (its `message`)."""
    return diagnostic("BUILD-1001", Severity.ERROR, message)


def merged(recorded: ExecutionData | None, added: Iterable[Diagnostic]) -> ExecutionData:
    """`recorded` (None: empty execution data) with `added` joined to its `diagnostics`: one of
    each (code, message), at most `MAX_DIAGNOSTICS` (the most severe kept, as Serval), and
    `diagnostics_truncated` once any was left out."""
    recorded = recorded or ExecutionData()
    every: dict[tuple[str, str], Diagnostic] = {}
    for item in [*(recorded.diagnostics or []), *added]:
        every.setdefault((item.code, item.message), item)
    kept = list(every.values())
    truncated = bool(recorded.diagnostics_truncated)
    if len(kept) > MAX_DIAGNOSTICS:
        truncated = True
        kept = sorted(kept, key=lambda d: -_RANK.get(d.severity, 0))[:MAX_DIAGNOSTICS]
    return recorded.updated(diagnostics=kept, diagnostics_truncated=truncated)


def with_fault(execution_data: ExecutionData | None, message: str) -> ExecutionData:
    """`execution_data` with the fault `message` as an `Error` diagnostic (`BUILD-1001`)."""
    return merged(execution_data, [build_fault(message)])
