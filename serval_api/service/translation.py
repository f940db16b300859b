"""Translate a segment with an engine's current model revision."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
import weakref

from serval_api.auth import READ_ENGINES, UPDATE_ENGINES, Caller
from serval_api.db.models import EngineRow
from serval_api.errors import InvalidArgument, NotBuilt, NotFound
from serval_api.routing.work import Served, TrainSegmentWork, TranslateWork, WordGraphWork
from serval_api.service import limits, micro_builds, train_segments
from serval_api.service.changes import engine_key
from serval_api.service.context import Services
from serval_api.service.engines import owned_engine, visible_engine
from serval_api.service.lookups import EngineRecord
from serval_common.core import (
    AlignedWordPair,
    Detail,
    Phrase,
    Sender,
    TranslationResult,
    TranslationSource,
    WordGraph,
    WordGraphArc,
    WorkClass,
)
from serval_common.families import family

log = logging.getLogger(__name__)

_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


async def translate(
    services: Services,
    caller: Caller,
    engine_id: str,
    segment: str,
    n: int = 1,
    *,
    detail: Detail = Detail.FULL,
    counted: bool = False,
    work_class: WorkClass = WorkClass.INTERACTIVE,
) -> Served[list[TranslationResult]]:
    """Up to n translations and the model revision that made them (a human translation sent with
    train-segment, or the echo engine, answer for the engine's current revision). An engine whose
    model learns trained segments (smt-transfer) always answers from the model. `detail`: what
    the caller will read (`Detail.TEXT`: confidences and alignment may be left out). `counted`:
    the request was already counted against the key's limit (a dialect's text, sentence by
    sentence). `work_class`: bulk for one of many sentences a dialect's request carries
    (`serval_common.core.work_class`)."""
    record = await _engine_for_segment(services, caller, engine_id, segment, counted=counted)
    engine = record.engine
    _check_n(services.settings.api.max_n_best, n)
    _require_built(engine)
    if record.has_train_segments and not train_segments.learns_segments(engine.type):
        async with services.db.session() as s:
            human = await train_segments.find_target(s, engine_id, segment)
        if human is not None:
            return Served([human_result(segment, human)], engine.model_revision)
    if family(engine.type).served_here:
        return Served([echo_result(segment)] * n, engine.model_revision)
    return await _dispatch_translate(services, caller.sender(work_class), engine, segment, n, detail=detail)


async def translate_prefix(
    services: Services, caller: Caller, engine_id: str, segment: str, prefix: str, n: int = 1
) -> Served[list[TranslationResult]]:
    """Up to n translations that start with `prefix`, the target text the user typed."""
    engine = (await _engine_for_segment(services, caller, engine_id, segment)).engine
    limits.segment(
        "the prefix",
        prefix,
        services.quotas.max_chars(caller, services.settings.api.max_segment_chars),
        blank=True,
    )
    _check_n(services.settings.api.max_n_best, n)
    _require_built(engine)
    if family(engine.type).served_here:
        return Served([echo_result(segment)] * n, engine.model_revision)
    return await _dispatch_translate(services, caller.sender(), engine, segment, n, prefix)


def _check_n(max_n_best: int, n: int) -> None:
    if not 1 <= n <= max_n_best:
        raise InvalidArgument(f"n must be between 1 and {max_n_best}, not {n}")


async def _dispatch_translate(
    services: Services,
    sender: Sender,
    engine: EngineRow,
    segment: str,
    n: int,
    prefix: str = "",
    *,
    detail: Detail = Detail.FULL,
) -> Served[list[TranslationResult]]:
    request_id = uuid.uuid4().hex
    log.debug("translate", extra={"engine_id": engine.id, "request_id": request_id, "n": n})
    work = TranslateWork(
        model=engine.current_revision,
        family=engine.type,
        source_language=engine.source_code,
        target_language=engine.target_code,
        segment=segment,
        n=n,
        prefix=prefix,
        detail=detail,
        sender=sender,
    )
    return await services.dispatcher.translate(
        work, request_id=request_id, timeout_s=services.settings.api.request_timeout_s
    )


async def get_word_graph(
    services: Services, caller: Caller, engine_id: str, segment: str
) -> Served[WordGraph]:
    engine = (await _engine_for_segment(services, caller, engine_id, segment)).engine
    _require_built(engine)
    if family(engine.type).served_here:
        return Served(echo_word_graph(segment), engine.model_revision)
    work = WordGraphWork(
        model=engine.current_revision,
        family=engine.type,
        source_language=engine.source_code,
        target_language=engine.target_code,
        segment=segment,
        sender=caller.sender(),
    )
    return await services.dispatcher.word_graph(
        work, request_id=uuid.uuid4().hex, timeout_s=services.settings.api.request_timeout_s
    )


async def _engine_for_segment(
    services: Services, caller: Caller, engine_id: str, segment: str, *, counted: bool = False
) -> EngineRecord:
    """The engine from `services.lookups` (no database round trip on most requests); another
    owner's engine answers 404 as `owned_engine` does. The request counts against the key's
    translate limit (unless `counted`)."""
    caller.require(READ_ENGINES)
    if not counted:
        await services.quotas.translate(caller)
    record = await services.lookups.engine(engine_id) if limits.can_be_id(engine_id) else None
    if record is None:
        raise NotFound(f"engine {limits.shown(engine_id)} not found")
    visible_engine(record.engine, caller, engine_id)
    limits.segment(
        "the segment", segment, services.quotas.max_chars(caller, services.settings.api.max_segment_chars)
    )
    return record


def echo_word_graph(segment: str) -> WordGraph:
    """One path through the segment's words, each copied with confidence 1."""
    words = tuple(_WORDS.findall(segment))
    return WordGraph(
        source_tokens=words,
        initial_state_score=0.0,
        final_states=(len(words),),
        arcs=tuple(
            WordGraphArc(
                prev_state=i,
                next_state=i + 1,
                score=0.0,
                target_tokens=(word,),
                confidences=(1.0,),
                source_segment_start=i,
                source_segment_end=i + 1,
                alignment=(AlignedWordPair(0, 0),),
                sources=(TranslationSource.PRIMARY,),
            )
            for i, word in enumerate(words)
        ),
    )


async def train_segment(
    services: Services,
    caller: Caller,
    engine_id: str,
    source_segment: str,
    target_segment: str,
    sentence_start: bool = True,
) -> None:
    """Store the pair; for a family that learns segments, then have every node holding a revision
    of the engine learn it, and return once they have (or `api.request_timeout_s` passed: a node
    that missed it replays it when it next loads the revision). The pair stays stored whatever the
    nodes answer."""
    caller.require(UPDATE_ENGINES)
    await services.quotas.translate(caller)
    limit = services.quotas.max_chars(caller, services.settings.api.max_segment_chars)
    async with _learning_order(engine_id):
        async with services.db.session() as s:
            engine = await owned_engine(s, caller, engine_id, lock=True)
            limits.segment("sourceSegment", source_segment, limit)
            limits.segment("targetSegment", target_segment, limit)
            _require_built(engine)
            stored = await train_segments.store_pair(
                s, engine, source_segment, target_segment, sentence_start
            )
            if train_segments.learns_segments(engine.type):
                engine.corpus_size += 1  # as Serval's smt-transfer counts each trained segment
            learns = train_segments.revision_learns(engine)
            work = TrainSegmentWork(
                model=engine.current_revision,
                family=engine.type,
                source_segment=source_segment,
                target_segment=target_segment,
                sentence_start=sentence_start,
                seq=stored.seq,
                previous_seq=stored.previous_seq,
            )
        services.changes.notify(engine_key(engine_id))
        extra = {"engine_id": engine_id, "seq": work.seq}
        if not learns:
            log.info("segment trained", extra=extra)
            return
        request_id = uuid.uuid4().hex
        learned = await services.dispatcher.train_segment(
            work, request_id=request_id, timeout_s=services.settings.api.request_timeout_s
        )
    log.info("segment trained", extra={**extra, "request_id": request_id, "nodes": learned})
    micro_builds.check_soon(services, engine_id)


_orders: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def _learning_order(engine_id: str) -> asyncio.Lock:
    """One lock per engine, held from storing a pair until the nodes learned it, so this replica
    sends an engine's pairs in the order of their numbers (a node applies each number once)."""
    lock = _orders.get(engine_id)
    if lock is None:
        lock = _orders[engine_id] = asyncio.Lock()
    return lock


def human_result(segment: str, target: str) -> TranslationResult:
    """A stored human translation: every word from the human, confidence 1, one phrase, and a
    monotone alignment along the diagonal that touches every source and target word."""
    source_words = tuple(_WORDS.findall(segment))
    target_words = tuple(_WORDS.findall(target))
    steps = max(len(source_words), len(target_words)) if source_words and target_words else 0
    return TranslationResult(
        translation=target.strip(),
        source_tokens=source_words,
        target_tokens=target_words,
        confidences=(1.0,) * len(target_words),
        sources=(TranslationSource.HUMAN,) * len(target_words),
        alignment=tuple(
            AlignedWordPair(i * len(source_words) // steps, i * len(target_words) // steps)
            for i in range(steps)
        ),
        phrases=(Phrase(0, len(source_words), len(target_words)),),
    )


def echo_result(segment: str) -> TranslationResult:
    words = tuple(_WORDS.findall(segment))
    return TranslationResult(
        translation=segment.strip(),
        source_tokens=words,
        target_tokens=words,
        confidences=(1.0,) * len(words),
        sources=(TranslationSource.PRIMARY,) * len(words),
        alignment=tuple(AlignedWordPair(i, i) for i in range(len(words))),
        phrases=(Phrase(0, len(words), len(words)),),
    )


def _require_built(engine: EngineRow) -> None:
    if engine.model_revision == 0:
        raise NotBuilt(f"engine {engine.id} has not been built yet; start a build first")
