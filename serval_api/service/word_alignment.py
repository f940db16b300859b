"""Word-alignment engines (`statistical`, `echo-word-alignment`): what differs from translation engines.

Engines, parallel corpora, builds and queues are the translation services called with
`types=WORD_ALIGNMENT_TYPES`, so an engine of one kind is never found under the other's API. This
module holds what only word alignment has: aligning one sentence pair live on a node (`align`),
the rows a build job streams back over InsertWordAlignments (`insert`, stored for the build's
model revision as pretranslations are) and reading them (`list_word_alignments`).
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import WORD_ALIGNMENT_TYPES, WordAlignmentRow
from serval_api.errors import InvalidArgument, NotBuilt, NotFound
from serval_api.routing.work import AlignWork, Served
from serval_api.service import limits, pretranslations
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine, visible_engine
from serval_api.service.parallel_corpora import owned_parallel_corpus
from serval_common.core import AlignedWordPair, WordAlignmentResult
from serval_common.families import family

log = logging.getLogger(__name__)

MAX_TOKENS = 10_000
"""Tokens per side of one streamed row; a verse has tens."""

_WHITESPACE = re.compile(r"\s")


@dataclass(frozen=True)
class WordAlignmentInsert:
    """One InsertWordAlignments message, as the service takes it; `alignment` holds
    `(sourceIndex, targetIndex, score)` triples."""

    engine_id: str
    corpus_id: str
    text_id: str
    source_refs: list[str] = field(default_factory=list)
    target_refs: list[str] = field(default_factory=list)
    source_tokens: list[str] = field(default_factory=list)
    target_tokens: list[str] = field(default_factory=list)
    alignment: list[tuple[int, int, float]] = field(default_factory=list)


async def align(
    services: Services, caller: Caller, engine_id: str, source_segment: str, target_segment: str
) -> Served[WordAlignmentResult]:
    """Align one sentence pair with the engine's current model revision, on a node serving it."""
    caller.require(READ_ENGINES)
    await services.quotas.translate(caller)
    record = await services.lookups.engine(engine_id) if limits.can_be_id(engine_id) else None
    if record is None:
        raise NotFound(f"engine {limits.shown(engine_id)} not found")
    engine = visible_engine(record.engine, caller, engine_id, WORD_ALIGNMENT_TYPES)
    max_chars = services.quotas.max_chars(caller, services.settings.api.max_segment_chars)
    limits.segment("sourceSegment", source_segment, max_chars)
    limits.segment("targetSegment", target_segment, max_chars)
    if engine.model_revision == 0:
        raise NotBuilt(f"engine {engine.id} has no completed build; build it before aligning")
    if family(engine.type).served_here:
        return Served(echo_alignment(source_segment, target_segment), engine.model_revision)
    request_id = uuid.uuid4().hex
    log.debug("align", extra={"engine_id": engine.id, "request_id": request_id})
    work = AlignWork(
        model=engine.current_revision,
        family=engine.type,
        source_segment=source_segment,
        target_segment=target_segment,
        sender=caller.sender(),
    )
    return await services.dispatcher.align(
        work, request_id=request_id, timeout_s=services.settings.api.request_timeout_s
    )


def echo_tokens(segment: str) -> list[str]:
    """Serval's echo tokenizer, C#'s `string.Split()`: every whitespace character separates, so two
    in a row leave an empty token between them."""
    return _WHITESPACE.split(segment)


def echo_alignment(source_segment: str, target_segment: str) -> WordAlignmentResult:
    """The `echo-word-alignment` engine's answer (Serval's `EchoWordAlignmentEngineService`): each
    word aligned to the word at the same position, score 1."""
    source, target = tuple(echo_tokens(source_segment)), tuple(echo_tokens(target_segment))
    return WordAlignmentResult(
        source_tokens=source,
        target_tokens=target,
        alignment=tuple(AlignedWordPair(i, i, 1.0) for i in range(min(len(source), len(target)))),
    )


async def list_word_alignments(
    services: Services, caller: Caller, engine_id: str, corpus_id: str, *, text_id: str | None = None
) -> list[WordAlignmentRow]:
    """The rows of the engine's current model for one of its parallel corpora, in the order the
    job sent them; 409 before the engine's first completed build, as for pretranslations."""
    caller.require(READ_ENGINES)
    limits.optional_text("textId", text_id, limits.TEXT_ID_CHARS)
    async with services.db.session() as s:
        engine = await owned_engine(s, caller, engine_id, types=WORD_ALIGNMENT_TYPES)
        await owned_parallel_corpus(s, caller, engine_id, corpus_id, WORD_ALIGNMENT_TYPES)
        if engine.model_revision == 0:
            raise NotBuilt(f"engine {engine.id} has no completed build, so no word alignments")
        return await pretranslations.current_rows(s, WordAlignmentRow, engine, corpus_id, text_id)


async def insert(services: Services, token: str | None, rows: AsyncIterable[WordAlignmentInsert]) -> int:
    """A build job's stream of aligned pairs, authorized by its job token; see
    `pretranslations.insert_rows`."""
    return await pretranslations.insert_rows(services, token, rows, WordAlignmentRow, _validated)


def _validated(row: WordAlignmentInsert, engine_id: str, index: int, max_items: int) -> dict[str, Any]:
    where = f"word alignment {index}"
    pretranslations.check_streamed_row(where, row, engine_id, max_items)
    for name, tokens in (("source_tokens", row.source_tokens), ("target_tokens", row.target_tokens)):
        limits.items(f"{where}: {name}", tokens, MAX_TOKENS)
        for token in tokens:
            limits.no_nul(f"{where}: {name}", token)
    limits.items(f"{where}: alignment", row.alignment, len(row.source_tokens) * len(row.target_tokens))
    for k, (source_index, target_index, score) in enumerate(row.alignment):
        if not (0 <= source_index < len(row.source_tokens) and 0 <= target_index < len(row.target_tokens)):
            raise InvalidArgument(
                f"{where}: alignment[{k}] links token {source_index} to {target_index}, outside the "
                f"{len(row.source_tokens)} source and {len(row.target_tokens)} target tokens"
            )
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise InvalidArgument(f"{where}: alignment[{k}].score must be a probability, not {score}")
    return {
        "corpus_id": row.corpus_id,
        "text_id": row.text_id,
        "source_refs": list(row.source_refs),
        "target_refs": list(row.target_refs),
        "source_tokens": list(row.source_tokens),
        "target_tokens": list(row.target_tokens),
        "alignment": [[s, t, score] for s, t, score in row.alignment],
    }
