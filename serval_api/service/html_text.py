"""Translating the text of HTML and keeping its markup (LibreTranslate's `format: html`).

The markup is parsed with `selectolax` (the Lexbor engine: an HTML5 parser, as browsers parse)
and every text node with a letter in it is translated on its own and put back as text: tags,
attributes, comments and the document's structure stay as they were, and the serializer escapes
the translation (`&`, `<`, `>`), so a translation never becomes markup. Entities are read as the
characters they stand for and written back as the serializer writes them (`&amp;` and `&nbsp;`
stay, `&eacute;` becomes `é`).

Not translated: text inside `script`, `style`, `noscript`, `template`, `code`, `pre`, `kbd`,
`samp` and `var`, inside any element with HTML's `translate="no"` or the `notranslate` class,
and text with no letter (numbers, punctuation), which a translation model would only invent
words for. A fragment (the usual case: a paragraph, a subtitle with `<i>`) is parsed as one; a
whole document (starting with `<!DOCTYPE` or `<html`) as a document.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from selectolax.lexbor import LexborHTMLParser, LexborNode

SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "code", "pre", "kbd", "samp", "var"})
NO_TRANSLATE_CLASS = "notranslate"


async def translate_html(markup: str, translate: Callable[[str], Awaitable[str]]) -> str:
    """`markup` with each translatable text node replaced by `translate(text)` (each distinct
    text translated once, all at the same time)."""
    parser = LexborHTMLParser(markup, is_fragment=not is_document(markup))
    root = parser.root
    if root is None:
        return markup
    nodes = [node for node in root.traverse(include_text=True) if _translatable(node)]
    if not nodes:
        return markup
    texts = list(dict.fromkeys(node.text_content or "" for node in nodes))
    translations = dict(zip(texts, await asyncio.gather(*(translate(t) for t in texts)), strict=True))
    for node in nodes:
        node.replace_with(translations[node.text_content or ""])
    return parser.html or ""


def plain_text(markup: str) -> str:
    """The text that `translate_html` would translate, one line per text node (for detecting
    the language of markup by its words rather than its tag names)."""
    root = LexborHTMLParser(markup, is_fragment=not is_document(markup)).root
    if root is None:
        return ""
    return "\n".join(
        node.text_content or "" for node in root.traverse(include_text=True) if _translatable(node)
    )


def is_document(markup: str) -> bool:
    start = markup.lstrip()[:9].lower()
    return start.startswith(("<!doctype", "<html"))


def _translatable(node: LexborNode) -> bool:
    if not node.is_text_node:
        return False
    text = node.text_content or ""
    if not any(c.isalpha() for c in text):
        return False
    element = node.parent
    while element is not None:
        if element.tag in SKIPPED_TAGS:
            return False
        attributes = element.attributes
        if (attributes.get("translate") or "").strip().lower() == "no":
            return False
        if NO_TRANSLATE_CLASS in (attributes.get("class") or "").split():
            return False
        element = element.parent
    return True


__all__ = ["SKIPPED_TAGS", "is_document", "plain_text", "translate_html"]
