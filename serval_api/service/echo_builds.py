"""Echo builds (`echo`, `echo-word-alignment`): the build Serval's echo engines run, here a short
task of the API service (`serval_api.builds.echo`) instead of a build job.

Like Serval's `EchoPreprocessBuildJob` / `EchoWordAlignmentPreprocessBuildJob` and the postprocess
job after them, it reports what any job reports, so the build goes Pending → Active → Completed,
each change a new build revision and the same webhooks: started, then the rows it made from the
build's export (`builds/{buildId}/`, written by `corpus_export.write_build_files`), then completed.
A build canceled or deleted meanwhile stops it at its next step.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

from serval_api.db.models import BuildRow, PretranslationRow, WordAlignmentRow
from serval_api.errors import NotBuilt, NotFound
from serval_api.service import platform, pretranslations
from serval_api.service.context import Services
from serval_api.service.word_alignment import echo_tokens
from serval_common.families import Kind, family
from serval_common.jobs import WORD_ALIGN_INPUT, JobSpec
from serval_common.redact import error_reference

log = logging.getLogger(__name__)

ECHO_CONFIDENCE = {Kind.TRANSLATION: 1.0, Kind.WORD_ALIGNMENT: 0.0}
"""The confidence an echo build of each kind completes with, as Serval's echo training jobs report it."""


async def run(services: Services, spec: JobSpec) -> None:
    """Run the echo build `spec` names to its end; a failure faults it with an error id."""
    extra = {"build_id": spec.build_id, "engine_id": spec.engine_id}
    kind = family(spec.engine_type).kind
    try:
        await platform.build_started(services, spec.build_id)
        async with services.db.session() as s:
            build = await s.get(BuildRow, spec.build_id)
        if build is None or not build.build_state.is_running:
            return
        if kind is Kind.WORD_ALIGNMENT:
            pairs = await _export(services, build.id, WORD_ALIGN_INPUT)
            await pretranslations.write_build_rows(services, WordAlignmentRow, build, _alignments(pairs))
        else:
            sources = await _export(services, build.id, "pretranslate.src.json")
            await pretranslations.write_build_rows(services, PretranslationRow, build, _translations(sources))
        await platform.build_completed(services, build.id, corpus_size=0, confidence=ECHO_CONFIDENCE[kind])
    except (NotBuilt, NotFound) as e:
        log.info("echo build stopped: it was canceled or deleted", extra={**extra, "reason": str(e)})
    except Exception as e:
        message = error_reference("the echo build failed", e, log, extra)
        with contextlib.suppress(NotFound):
            await platform.build_faulted(services, spec.build_id, message)


async def _export(services: Services, build_id: str, name: str) -> list[dict[str, Any]]:
    """One of the build's exported JSON files; absent (nothing to pretranslate) reads as no rows."""
    store = services.store
    key = f"builds/{build_id}/{name}"
    if not await services.store_call(store.exists, key):
        return []
    rows: list[dict[str, Any]] = json.loads(await services.store_call(store.read_bytes, key))
    return rows


def _translations(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each source segment is its own translation, as Serval's echo engine answers."""
    return [
        {
            "corpus_id": row["corpusId"],
            "text_id": row["textId"],
            "source_refs": row["sourceRefs"],
            "target_refs": row["targetRefs"],
            "translation": row["translation"],
            "confidence": 1.0,
        }
        for row in sources
    ]


def _alignments(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each word aligned to the word at the same position. Serval's echo build leaves the score
    unset, so its rows carry 0 where its live `align` says 1."""
    rows = []
    for pair in pairs:
        source, target = echo_tokens(pair["source"]), echo_tokens(pair["target"])
        rows.append(
            {
                "corpus_id": pair["corpusId"],
                "text_id": pair["textId"],
                "source_refs": pair["sourceRefs"],
                "target_refs": pair["targetRefs"],
                "source_tokens": source,
                "target_tokens": target,
                "alignment": [[i, i, 0.0] for i in range(min(len(source), len(target)))],
            }
        )
    return rows
