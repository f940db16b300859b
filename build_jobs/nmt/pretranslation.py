"""Pretranslation: before a build publishes its revision, the job translates the segments the API
service exported to `builds/{buildId}/pretranslate.src.json` and writes
`builds/{buildId}/pretranslate.trg.json`: the same rows, `translation` now the MT output, plus
`confidence` (the exponential of CTranslate2's length-normalized score, in 0..1).

A revision that reads fuzzy matches (`Manifest.input_format`) is given each segment with the target
of its best match in the memory it publishes (`MEMORY_FILE`), as the node serves it."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

from build_jobs.data import Row, read_source_rows, target_key
from build_jobs.nmt.evaluation import NllbTranslator, match_targets
from build_jobs.progress import Canceled
from serval_common.fuzzy_memory import FUZZY_MATCH_INPUT, MEMORY_FILE, TranslationMemory
from serval_common.manifest import Manifest, fetch_folder
from serval_common.model_revision import ModelRevision
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""(segments translated, segments to translate)"""

MAX_LENGTH = 256
"""Tokens per segment, as the node decodes by default (`node.max_decoding_length`), unless the
model's position limit is lower."""


def revision_memory(manifest: Manifest, model_dir: Path) -> TranslationMemory | None:
    """The memory a revision that reads fuzzy matches publishes in its folder; None for a plain one."""
    if manifest.input_format != FUZZY_MATCH_INPUT:
        return None
    return TranslationMemory.read(model_dir / MEMORY_FILE)


def pretranslate(
    store: ModelStore,
    build_id: str,
    model_dir: Path,
    source_code: str,
    target_code: str,
    *,
    beams: int,
    batch_size: int,
    max_length: int = MAX_LENGTH,
    memory: TranslationMemory | None = None,
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
    rows: list[Row] | None = None,
) -> list[Row]:
    """Translate every exported segment (`rows`, when the caller has read them already) with the
    model in `model_dir` and write the target file. An empty source segment gets an empty
    translation (confidence 1) without reaching the model. `memory`: that of a model that reads
    fuzzy matches (`revision_memory`), where each segment's match comes from. Raises `Canceled`
    when `should_cancel` turns true between batches."""
    rows = read_source_rows(store, build_id) if rows is None else rows
    if not rows:
        return []
    out = [{**row, "translation": "", "confidence": 1.0} for row in rows]
    pending = [i for i, row in enumerate(rows) if str(row.get("translation") or "").strip()]
    if pending:
        translator = NllbTranslator(model_dir, device="auto")
        for start in range(0, len(pending), batch_size):
            if should_cancel is not None and should_cancel():
                raise Canceled("the build was canceled while pretranslating")
            chunk = pending[start : start + batch_size]
            sources = [str(rows[i]["translation"]) for i in chunk]
            translations = translator.translate(
                sources,
                source_code,
                target_code,
                beam_size=beams,
                max_batch_size=batch_size,
                max_length=max_length,
                matches=None if memory is None else match_targets(memory, sources),
            )
            for i, translation in zip(chunk, translations, strict=True):
                out[i]["translation"] = translation.text
                out[i]["confidence"] = _confidence(translation.score)
            if progress is not None:
                progress(start + len(chunk), len(pending))
    store.write_bytes(target_key(build_id), json.dumps(out, ensure_ascii=False).encode())
    log.info("pretranslated", extra={"build_id": build_id, "rows": len(out), "translated": len(pending)})
    return out


def decoding_limit(max_positions: int | None) -> int:
    """Tokens per segment for a model with `max_positions` (the decoder's first position holds the
    start token)."""
    return MAX_LENGTH if max_positions is None else min(MAX_LENGTH, max_positions - 1)


def pretranslate_revision(
    store: ModelStore,
    *,
    engine_id: str,
    revision: int,
    build_id: str,
    source_code: str,
    target_code: str,
    beams: int,
    batch_size: int,
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> list[Row]:
    """`pretranslate` with the engine's published revision (an inference-only revision's manifest
    points at the base model's weights)."""
    return pretranslate_stored_model(
        store,
        ModelRevision(engine_id, revision).checked_location(),
        build_id=build_id,
        source_code=source_code,
        target_code=target_code,
        beams=beams,
        batch_size=batch_size,
        progress=progress,
        should_cancel=should_cancel,
    )


def pretranslate_stored_model(
    store: ModelStore,
    prefix: str,
    *,
    build_id: str,
    source_code: str,
    target_code: str,
    beams: int,
    batch_size: int,
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> list[Row]:
    """`pretranslate` with the model folder at `prefix` in the store, fetched only when there is
    work."""
    rows = read_source_rows(store, build_id)
    if not rows:
        return []
    with tempfile.TemporaryDirectory(prefix="serval-pretranslate-") as tmp:
        manifest, model_dir = fetch_folder(store, prefix, Path(tmp), with_checkpoint=False)
        return pretranslate(
            store,
            build_id,
            model_dir,
            source_code,
            target_code,
            beams=beams,
            batch_size=batch_size,
            max_length=decoding_limit(manifest.max_positions),
            memory=revision_memory(manifest, model_dir),
            progress=progress,
            should_cancel=should_cancel,
            rows=rows,
        )


def _confidence(score: float) -> float:
    return min(1.0, max(0.0, math.exp(score))) if math.isfinite(score) else 0.0
