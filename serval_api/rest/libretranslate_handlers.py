"""What LibreTranslate's `/translate`, `/detect` and `/languages` answer: each reads its fields
(`libretranslate_request.py`), asks the shared core (`service.text_translation`, which picks the
model: a key bound to an engine translates its pair, an unbound key any pair of the public base
model) and maps the core's answer to LibreTranslate's codes and shapes.

It stands apart from the router (`libretranslate.py`), which only declares the routes and wraps
every answer in LibreTranslate's CORS headers and error shape.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

from fastapi import Request, Response

from serval_api.auth import READ_ENGINES, Caller
from serval_api.errors import InvalidArgument
from serval_api.rest.libretranslate_codes import language_name, libre_code, nllb_code
from serval_api.rest.libretranslate_protocol import AUTO, FORMATS, MISSING
from serval_api.rest.libretranslate_request import (
    check_size,
    optional_caller,
    read_alternatives,
    read_request,
    read_string,
    read_texts,
    required_caller,
)
from serval_api.service import text_translation
from serval_api.service.context import Services
from serval_api.service.detection import Detection, detect, detect_async
from serval_api.service.html_text import plain_text, translate_html
from serval_api.service.text_translation import TextModel, TextTranslation

SHOWN_CHARS = 20
"""How much of a client's value an error message quotes."""
SHOWN_LANGUAGES = 12
"""Up to how many languages a refusal names; beyond it, it points at `/languages`."""
ANONYMOUS = Caller(owner="", scopes=frozenset({READ_ENGINES}))
"""Who reads `/languages` without a key: it may see the public base model's languages, as anyone
may see LibreTranslate's."""


async def translate(services: Services, request: Request) -> dict[str, Any]:
    asked = await read_request(request)
    caller = await required_caller(services, request, asked.fields)
    texts, batch = read_texts(asked)
    source, target = read_string(asked.fields, "source"), read_string(asked.fields, "target")
    if not source:
        raise InvalidArgument(MISSING.format("source"))
    if not target:
        raise InvalidArgument(MISSING.format("target"))
    text_format = read_string(asked.fields, "format") or "text"
    if text_format not in FORMATS:
        raise InvalidArgument(f"{_shown(text_format)} format is not supported")
    alternatives = read_alternatives(asked.fields, services.settings.api.max_n_best - 1)
    check_size(services, texts)

    model = await text_translation.text_model(services, caller)
    pairs = _Pairs.of(model)
    target_code = nllb_code(target, model.languages)
    if target_code is None:
        raise InvalidArgument(f"{_shown(target)} is not supported; {_supported('into', pairs.all_targets())}")
    detected: list[Detection] | None = None
    if source.strip().lower() == AUTO:
        detected = await asyncio.to_thread(_detect_each, texts, pairs.sources, text_format)
        sources = [d.language for d in detected]
    else:
        source_code = nllb_code(source, pairs.sources)
        if source_code is None:
            raise InvalidArgument(f"{_shown(source)} is not supported; {_supported('from', pairs.sources)}")
        sources = [source_code] * len(texts)
    for source_code in dict.fromkeys(sources):
        same = detected is not None and source_code == target_code
        if not same and target_code not in pairs.targets(source_code):
            raise InvalidArgument(
                f"{language_name(target_code)} ({libre_code(target_code)}) is not available as a target "
                f"language from {language_name(source_code)} ({libre_code(source_code)})"
            )

    # Every text of the request shares its bound on sentences in flight, and they fail together.
    sentences_at_once = text_translation.sentence_limit(services)

    async def one(text: str, source_code: str) -> TextTranslation:
        if not text.strip() or source_code == target_code:
            return TextTranslation(text)  # nothing to translate, or already in the target language
        if text_format == "html":
            return TextTranslation(await translate_html(text, piece(source_code)))
        return await text_translation.translate_text(
            services,
            caller,
            source_code,
            target_code,
            text,
            alternatives=alternatives,
            texts=len(texts),
            sentences_at_once=sentences_at_once,
        )

    def piece(source_code: str) -> Callable[[str], Awaitable[str]]:
        async def translated(text: str) -> str:
            answer = await text_translation.translate_text(
                services,
                caller,
                source_code,
                target_code,
                text,
                texts=len(texts),
                sentences_at_once=sentences_at_once,
            )
            return answer.translation

        return translated

    results = await text_translation.together(
        [partial(one, t, s) for t, s in zip(texts, sources, strict=True)]
    )
    answer: dict[str, Any] = {
        "translatedText": [r.translation for r in results] if batch else results[0].translation
    }
    if alternatives:
        every = [list(r.alternatives) for r in results]
        answer["alternatives"] = every if batch else every[0]
    if detected is not None:
        shown = [_detection(d) for d in detected]
        answer["detectedLanguage"] = shown if batch else shown[0]
    return answer


def _supported(direction: str, codes: tuple[str, ...]) -> str:
    """What a refusal adds: the languages the key does translate from or into."""
    if len(codes) > SHOWN_LANGUAGES:
        return f"translate {direction} one of the {len(codes)} languages /languages lists"
    named = [f"{language_name(code)} ({libre_code(code)})" for code in codes]
    return f"translate {direction} {' or '.join(named) if len(named) <= 2 else ', '.join(named)}"


async def detect_languages(services: Services, request: Request) -> list[dict[str, Any]]:
    asked = await read_request(request)
    caller = await required_caller(services, request, asked.fields)
    texts, _ = read_texts(asked)
    model = await text_translation.text_model(services, caller)
    sources = _Pairs.of(model).sources
    # Detection needs no more than a translation may send; the rest would only cost time.
    text = "\n".join(texts)[: services.settings.api.max_text_chars]
    found = await detect_async(text, sources)
    return [_detection(d) for d in found or [Detection(sources[0], 0.0)]]


async def languages(services: Services, request: Request) -> Response:
    asked = await read_request(request)
    caller = await optional_caller(services, request, asked.fields)
    if caller is None:
        if text_translation.public_base_model(services) is None:
            return Response(b"[]", media_type="application/json")
        try:
            model = await text_translation.text_model(services, ANONYMOUS)
        except InvalidArgument:  # no public base model is published
            return Response(b"[]", media_type="application/json")
    else:
        model = await text_translation.text_model(services, caller)
    return Response(
        _language_list(model.languages, model.engine_id is not None), media_type="application/json"
    )


@lru_cache(maxsize=32)
def _language_list(languages: tuple[str, ...], bound: bool) -> bytes:
    """The rendered list (a base model's 200 languages each list 199 targets: rendered once)."""
    pairs = _Pairs(languages, bound)
    return json.dumps(
        [
            {
                "code": libre_code(code),
                "name": language_name(code),
                "targets": [libre_code(t) for t in pairs.targets(code)],
            }
            for code in languages
        ],
        ensure_ascii=False,
    ).encode()


@dataclass(frozen=True)
class _Pairs:
    """What a model translates: an engine its one pair, a base model any two of its languages."""

    languages: tuple[str, ...]
    bound: bool

    @classmethod
    def of(cls, model: TextModel) -> _Pairs:
        return cls(model.languages, model.engine_id is not None)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.languages[:1] if self.bound else self.languages

    def all_targets(self) -> tuple[str, ...]:
        return self.languages[1:] if self.bound else self.languages

    def targets(self, source: str) -> tuple[str, ...]:
        if self.bound:
            return self.languages[1:] if source == self.languages[0] else ()
        return tuple(code for code in self.languages if code != source)


def _detect_each(texts: list[str], candidates: tuple[str, ...], text_format: str) -> list[Detection]:
    """Each text's most likely language; a blank text gets the whole batch's (it is answered as
    it is anyway). Markup is detected by its text, not its tag names."""
    plain = [plain_text(t) if text_format == "html" else t for t in texts]
    fallback = Detection(candidates[0], 0.0)
    whole: Detection | None = None
    found = []
    for text in plain:
        if text.strip():
            found.append(next(iter(detect(text, candidates, 1)), fallback))
            continue
        if whole is None:
            whole = next(iter(detect("\n".join(plain), candidates, 1)), fallback)
        found.append(whole)
    return found


def _detection(found: Detection) -> dict[str, Any]:
    return {"confidence": found.confidence, "language": libre_code(found.language)}


def _shown(value: str) -> str:
    return value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…"
