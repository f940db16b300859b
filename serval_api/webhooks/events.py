from __future__ import annotations

from enum import StrEnum


class WebhookEvent(StrEnum):
    """Serval's `WebhookEvent`: the events a hook can ask for."""

    TRANSLATION_BUILD_STARTED = "TranslationBuildStarted"
    TRANSLATION_BUILD_FINISHED = "TranslationBuildFinished"
    WORD_ALIGNMENT_BUILD_STARTED = "WordAlignmentBuildStarted"
    WORD_ALIGNMENT_BUILD_FINISHED = "WordAlignmentBuildFinished"
