"""Translating text for the dialects whose clients name languages, not engines: SIL Converters'
NLLB Translator and LibreTranslate's clients.

- **Which model answers.** An API key bound to an engine (`Caller.engine_id`) translates with
  that engine's current revision (its stored human translations included) and only its language
  pair. An unbound key translates any pair of the deployment's **public base model**
  (`api.public_base_model`, by default `jobs.default_base_model` when it is published; off with
  `api.public_base_model_enabled`), served by the shared weights of every engine on it: no engine
  is created.
- **Text as translators send it.** A sentence or a whole paragraph: it is split into sentences
  with `sentencex` (which knows the world's scripts: `।`, `؟`, `።`, `。`…), the sentences are
  translated concurrently (a node batches them), and the translations are joined with the
  original whitespace and line breaks.
- **Bulk or interactive.** A text of a few sentences (SIL Converters' sentence or paragraph) is
  interactive work; a request of several texts (a LibreTranslate list) or a text of many sentences
  is bulk work (`serval_common.core.work_class`), which a node batches after the interactive work
  of every owner.
- **Only the text.** These clients read no confidences and no alignment (`Detail.TEXT`), so the
  node skips the passes that make them.
- **A long text is many requests.** Its sentences are sent to the nodes at most
  `api.text_sentence_concurrency` (8) at a time, the next as one is answered (for a client request
  of several texts, a LibreTranslate list or an HTML document, 8 in all: `sentence_limit`), so one text of
  hundreds of sentences cannot take a replica's waiting pool or a node's slots from other owners
  (and, bulk, it waits its owner's turn: `routing/fair_waiters.py`). When one sentence fails, the
  others are cancelled at once (on the nodes too) and the text fails with its error.
- **Limits.** Each sentence is one translate-type request against the key's per-minute limit:
  the text counts once as it arrives (so a refused text counts too, as any request does), and
  its sentences beyond the first once it is split, before any is sent: all or nothing, a text
  over the key's remaining allowance is refused (429) and nothing of it translated. The node does
  a sentence's work whatever the text around it, so this is what a key's limit means for the
  translate endpoint, and what DeepL, Google and LibreTranslate's own character limits do in
  effect (they count characters, which grow with sentences); a one-sentence text still counts
  once, so SIL Converters and LibreTranslate clients that send a sentence at a time see no
  change. So that a key whose limit is below a text's sentences can still send it, a text counts
  at most the key's whole limit (its first minute's worth). The key's `max_chars_per_request`
  replaces `api.max_text_chars` (`service/quotas.py`); over a limit the answer is `RateLimited`
  (429 with Retry-After and a short sentence).
- **Never a long wait.** When no node holds the model and it is not ready within
  `api.text_load_wait_s`, the answer is `ModelLoading` (503 with Retry-After); the load goes on.

Every error is a `ServalError` whose message is one short sentence that says what to do: the
dialects show it to the translator as it is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import langcodes
import sentencex

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import EngineType
from serval_api.errors import InvalidArgument, NotFound, PayloadTooLarge, Unavailable
from serval_api.routing.work import Served, TranslateWork
from serval_api.service import translation
from serval_api.service.context import Services
from serval_common.core import Detail, Sender, TranslationResult, work_class
from serval_common.languages import describe_languages
from serval_common.manifest import ManifestError, resolve_revision
from serval_common.model_revision import ModelRevision

log = logging.getLogger(__name__)
T = TypeVar("T")

BASE_MODEL_CACHE_S = 60.0
"""How long the public base model's manifest (its weights and languages) is reused."""
LOADING_MESSAGE = "The translation model is loading; try again in a few seconds."
LOADING_RETRY_AFTER_S = 5.0
BUSY_MESSAGE = "The translation service is busy or has no translation server running; try again in a minute."
TOO_LONG_MESSAGE = "A sentence is too long to translate; split it into shorter sentences."


class ModelLoading(Unavailable):
    """No node holds the model yet and it did not get ready within the dialects' wait."""


@dataclass(frozen=True)
class TextModel:
    """The model a caller's text is translated with."""

    languages: tuple[str, ...]
    """The NLLB codes it translates from and to (an engine: its two languages)."""
    revision: ModelRevision
    """What the dispatcher routes: the engine's current revision, or the public base model."""
    engine_id: str | None = None
    """The key's engine; None: the public base model."""
    name: str = ""
    """The public base model's name, or the engine's id."""


@dataclass(frozen=True)
class TextTranslation:
    translation: str
    alternatives: tuple[str, ...] = ()
    """Up to the number asked for, best first, each a whole translation of the text."""


@dataclass
class _BaseModelRecord:
    revision: ModelRevision
    languages: tuple[str, ...]
    read_at: float


_base_models: dict[tuple[str, str], _BaseModelRecord] = {}
"""(model store, name) → the public base model's weights and languages, read from its manifest."""


async def text_model(services: Services, caller: Caller) -> TextModel:
    """The model that answers `caller` (see the module docstring)."""
    caller.require(READ_ENGINES)
    if caller.engine_id:
        record = await services.lookups.engine(caller.engine_id)
        engine = record.engine if record is not None else None
        if engine is None or engine.owner != caller.owner:
            raise NotFound("The engine this key is bound to no longer exists; ask for a new key.")
        if EngineType(engine.type).is_word_alignment:
            raise InvalidArgument("This key is bound to a word-alignment engine, which does not translate.")
        if engine.model_revision == 0:
            raise InvalidArgument("The engine this key is bound to has not been built yet; build it first.")
        return TextModel(
            (engine.source_code, engine.target_code),
            engine.current_revision,
            engine_id=engine.id,
            name=engine.id,
        )
    name = public_base_model(services)
    if name is None:
        raise InvalidArgument("This service translates only with engines: use an API key bound to an engine.")
    base = await _base_model(services, name)
    return TextModel(base.languages, base.revision, name=name)


def public_base_model(services: Services) -> str | None:
    api = services.settings.api
    if not api.public_base_model_enabled:
        return None
    return api.public_base_model or services.settings.jobs.default_base_model


async def languages(services: Services, caller: Caller) -> tuple[str, ...]:
    """The NLLB codes `caller` can translate between."""
    return (await text_model(services, caller)).languages


async def translate_text(
    services: Services,
    caller: Caller,
    source_code: str,
    target_code: str,
    text: str,
    *,
    alternatives: int = 0,
    texts: int = 1,
    sentences_at_once: asyncio.Semaphore | None = None,
) -> TextTranslation:
    """`text` translated sentence by sentence, whitespace kept; `alternatives` more whole
    translations (each sentence's next-best, joined the same way). `texts`: how many texts the
    client's request carries (a LibreTranslate list): with several, or with a text of many
    sentences, the sentences are bulk work, which a node serves after interactive work.
    `sentences_at_once`: the client request's bound on its sentences in flight, shared by every
    text it carries (`sentence_limit`); None: this text's own."""
    caller.require(READ_ENGINES)
    await services.quotas.translate(caller)  # the text's first sentence; the others below
    limit = services.quotas.max_chars(caller, services.settings.api.max_text_chars)
    if not text.strip():
        raise InvalidArgument("There is no text to translate.")
    if len(text) > limit:
        raise InvalidArgument(f"The text is longer than {limit} characters; send it in smaller parts.")
    if not 0 <= alternatives < services.settings.api.max_n_best:
        raise InvalidArgument(f"Ask for at most {services.settings.api.max_n_best - 1} alternatives.")
    model = await text_model(services, caller)
    for code in (source_code, target_code):
        if code not in model.languages:
            raise InvalidArgument(_unknown_language(code, model))
    if model.engine_id is not None and (source_code, target_code) != model.languages:
        raise InvalidArgument(_unknown_language(source_code, model))
    if source_code == target_code:
        raise InvalidArgument("The source and target languages are the same; choose two languages.")
    pieces = split_sentences(text, source_code)
    sentences = [i for i, piece in enumerate(pieces) if piece.strip()]
    if len(sentences) > 1:
        await services.quotas.translate(caller, count=len(sentences) - 1, counted=1)
    sender = caller.sender(work_class(sentences=len(sentences), texts=texts))
    answers = await together(
        [
            functools.partial(
                _translate_sentence,
                services,
                caller,
                sender,
                model,
                source_code,
                target_code,
                pieces[i],
                1 + alternatives,
            )
            for i in sentences
        ],
        services.settings.api.text_sentence_concurrency,
        sentences_at_once or sentence_limit(services),
    )
    versions: list[str] = []
    for k in range(1 + alternatives):
        out = list(pieces)
        for i, results in zip(sentences, answers, strict=True):
            if k >= len(results):
                break
            out[i] = _with_spacing(pieces[i], results[k].translation)
        else:
            versions.append("".join(out))
    return TextTranslation(versions[0], tuple(versions[1:]))


def sentence_limit(services: Services) -> asyncio.Semaphore:
    """One client request's bound on its sentences in flight (`api.text_sentence_concurrency`),
    for every text it carries (a LibreTranslate list, an HTML document's text nodes)."""
    return asyncio.Semaphore(services.settings.api.text_sentence_concurrency)


async def together(
    calls: Iterable[Callable[[], Awaitable[T]]],
    limit: int | None = None,
    slots: asyncio.Semaphore | None = None,
) -> list[T]:
    """Each call's answer, in order, with at most `limit` running at once (None: all) and each
    holding one of `slots` while it runs. When one fails, the others are cancelled (a sentence's
    cancellation reaches its node) and its error is raised."""
    pending = list(enumerate(calls))
    pending.reverse()
    answers: dict[int, T] = {}

    async def worker() -> None:
        while pending:
            index, call = pending.pop()
            if slots is None:
                answers[index] = await call()
            else:
                async with slots:
                    answers[index] = await call()

    workers = len(pending) if limit is None else min(max(1, limit), len(pending))
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(workers):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise _first(failed) from None
    return [answers[i] for i in range(len(answers))]


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    error = group.exceptions[0]
    return _first(error) if isinstance(error, BaseExceptionGroup) else error


def split_sentences(text: str, nllb_code: str) -> list[str]:
    """The text's sentences, each with the whitespace that follows it: joined, they are `text`."""
    pieces = list(sentencex.segment(_iso_language(nllb_code), text))
    if "".join(pieces) != text:  # never lose a character, whatever the segmenter does
        return [text]
    return pieces


def _with_spacing(original: str, translation: str) -> str:
    """The translation with the original sentence's leading and trailing whitespace."""
    stripped = original.strip()
    start = original.index(stripped[0]) if stripped else 0
    return original[:start] + translation.strip() + original[start + len(stripped) :]


def _iso_language(nllb_code: str) -> str:
    try:
        return str(langcodes.Language.get(nllb_code.partition("_")[0]).language or "en")
    except (ValueError, langcodes.tag_parser.LanguageTagError):
        return "en"


def _unknown_language(code: str, model: TextModel) -> str:
    if model.engine_id is not None:
        source, target = model.languages
        return f"This key translates {source} to {target} only; choose those languages."
    shown = code if len(code) <= 20 else code[:20] + "…"
    return (
        f"{shown!r} is not a language this service translates; its model {model.name} knows "
        f"{describe_languages(model.languages)}, so choose one of those."
    )


async def _translate_sentence(
    services: Services,
    caller: Caller,
    sender: Sender,
    model: TextModel,
    source_code: str,
    target_code: str,
    sentence: str,
    n: int,
) -> list[TranslationResult]:
    wait_s = services.settings.api.text_load_wait_s
    call: Awaitable[Served[list[TranslationResult]]]
    if model.engine_id is not None:
        call = translation.translate(
            services,
            caller,
            model.engine_id,
            sentence,
            n,
            detail=Detail.TEXT,
            counted=True,
            work_class=sender.work_class,
        )
    else:
        work = TranslateWork(
            model=model.revision,
            family=EngineType.NMT.value,
            source_language=source_code,
            target_language=target_code,
            segment=sentence,
            n=n,
            detail=Detail.TEXT,
            sender=sender,
        )
        call = services.dispatcher.translate(work, request_id=uuid.uuid4().hex, timeout_s=wait_s)
    try:
        async with asyncio.timeout(wait_s):
            return (await call).value
    except (TimeoutError, Unavailable) as exc:
        if services.dispatcher.loading(model.revision):
            raise ModelLoading(LOADING_MESSAGE, retry_after_s=LOADING_RETRY_AFTER_S) from None
        retry = exc.retry_after_s if isinstance(exc, Unavailable) else None
        log.warning(
            "text translation unavailable", extra={"model": model.revision.location, "error": str(exc)}
        )
        raise Unavailable(BUSY_MESSAGE, retry_after_s=retry or LOADING_RETRY_AFTER_S) from None
    except (InvalidArgument, PayloadTooLarge) as exc:  # a bound engine's limit is `max_segment_chars`
        log.info("a sentence was refused", extra={"model": model.revision.location, "error": exc.message})
        raise InvalidArgument(TOO_LONG_MESSAGE) from None


async def _base_model(services: Services, name: str) -> _BaseModelRecord:
    key = (services.settings.resolved_store_url, name)
    cached = _base_models.get(key)
    now = time.monotonic()
    if cached is not None and now - cached.read_at < BASE_MODEL_CACHE_S:
        return cached
    revision = ModelRevision.of_base_model(name)
    try:
        resolved = await services.store_call(resolve_revision, services.store, revision.checked_location())
    except ManifestError as exc:
        log.warning("the public base model is not published", extra={"base_model": name, "error": str(exc)})
        raise InvalidArgument(
            "No model is published for translating without an engine yet; ask the administrator."
        ) from None
    record = _BaseModelRecord(
        revision.with_weights(resolved.weights), tuple(resolved.manifest.languages), now
    )
    _base_models[key] = record
    return record


__all__ = [
    "LOADING_MESSAGE",
    "ModelLoading",
    "TextModel",
    "TextTranslation",
    "languages",
    "public_base_model",
    "sentence_limit",
    "split_sentences",
    "text_model",
    "together",
    "translate_text",
]
