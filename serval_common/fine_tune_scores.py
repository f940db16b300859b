"""Whether a fine-tune made its held-out chrF worse than the base model's, and the words a build
uses to say so: the build job (its message, and whether it publishes, `jobs.publish_worse_models`)
and the API service (the build's `MODEL-1001` diagnostic) share them."""

from __future__ import annotations


def chrf_worse(before: float, after: float) -> bool:
    """Compared as builds report chrF, to one decimal: 24.41 → 24.38 reads "24.4 → 24.4", no drop."""
    return round(after, 1) < round(before, 1)


def worse_sentence(
    before: float, after: float, *, published: bool, learning_rate: float | None = None
) -> str:
    """One sentence for the build's message and diagnostics; `learning_rate`: the one the fine-tune
    used, named in the advice."""
    change = f"({before:.1f} → {after:.1f})"
    used = "" if learning_rate is None else f" (this build used {learning_rate:g})"
    advice = f"build again with a lower learningRate{used} or more texts"
    if published:
        return (
            f"Fine-tuning made the held-out chrF worse {change}; it was published all the same, as "
            f"this deployment publishes worse models, so check the drafts or {advice}."
        )
    return (
        f"Fine-tuning made the held-out chrF worse {change}, so it was not published and the engine "
        f"keeps the model it had; {advice}."
    )
