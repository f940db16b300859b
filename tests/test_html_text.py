"""`format: html`: the text of the markup is translated, the markup kept (serval_api/service/html_text.py).
The translation here is a plain function of the text, so what changed is plain to see."""

from __future__ import annotations

import asyncio

import pytest

from serval_api.service.html_text import is_document, plain_text, translate_html

asked: list[str] = []


async def shout(text: str) -> str:
    """A stand-in translation that is easy to spot, with characters that must be escaped."""
    asked.append(text)
    return text.upper() + " <&>"


def translated(markup: str) -> str:
    asked.clear()
    return asyncio.run(translate_html(markup, shout))


def test_nested_tags_keep_their_places_and_each_text_is_translated_on_its_own() -> None:
    assert translated("<p>Hello <b>big <i>bold</i> world</b>!</p>") == (
        "<p>HELLO  &lt;&amp;&gt;<b>BIG  &lt;&amp;&gt;<i>BOLD &lt;&amp;&gt;</i> WORLD &lt;&amp;&gt;</b>!</p>"
    ), "the text `!` has no letter and is left as it is"


def test_attributes_comments_and_untranslatable_elements_are_untouched() -> None:
    markup = (
        '<a href="/in the beginning?x=1&amp;y=2" title="Title text" data-x=\'a\'>link</a>'
        "<!-- a comment --><script>var text = 'hi';</script><style>p { color: red }</style>"
        '<code>code</code><pre>pre</pre><span translate="no">Name</span><div class="x notranslate">Brand</div>'
    )
    assert translated(markup) == (
        '<a href="/in the beginning?x=1&amp;y=2" title="Title text" data-x="a">LINK &lt;&amp;&gt;</a>'
        "<!-- a comment --><script>var text = 'hi';</script><style>p { color: red }</style>"
        '<code>code</code><pre>pre</pre><span translate="no">Name</span><div class="x notranslate">Brand</div>'
    )
    assert asked == ["link"]


def test_entities_are_read_as_their_characters_and_written_back_escaped() -> None:
    assert translated("<p>Tom &amp; Jerry&nbsp;&lt;3 &eacute;t&eacute; &#65;</p>") == (
        "<p>TOM &amp; JERRY&nbsp;&lt;3 ÉTÉ A &lt;&amp;&gt;</p>"
    )
    assert asked == ["Tom & Jerry\xa0<3 été A"]


def test_a_text_seen_twice_is_translated_once() -> None:
    assert translated("<li>Yes</li><li>No</li><li>Yes</li>") == (
        "<li>YES &lt;&amp;&gt;</li><li>NO &lt;&amp;&gt;</li><li>YES &lt;&amp;&gt;</li>"
    )
    assert asked == ["Yes", "No"]


def test_a_whole_document_keeps_its_structure() -> None:
    markup = '<!DOCTYPE html><html lang="en"><head><title>Title</title></head><body><p>Body</p></body></html>'
    assert is_document(markup) and not is_document("<p>x</p>")
    assert translated(markup) == (
        '<!DOCTYPE html><html lang="en"><head><title>TITLE &lt;&amp;&gt;</title></head>'
        "<body><p>BODY &lt;&amp;&gt;</p></body></html>"
    )


@pytest.mark.parametrize("markup", ["", "   ", "<br>", "<p>42 — 7</p>", "<!-- only a comment -->"])
def test_markup_without_words_comes_back_as_it_was(markup: str) -> None:
    assert translated(markup) == markup
    assert asked == []


def test_plain_text_is_an_html_text() -> None:
    assert translated("Fish & chips") == "FISH & CHIPS &lt;&amp;&gt;".replace("& C", "&amp; C")


def test_the_text_for_detection_leaves_the_tags_out() -> None:
    assert plain_text('<p title="x">Habari <b>yako</b></p><code>def f()</code>') == "Habari \nyako"
