"""Markdown -> Telegram HTML and plain text: valid for Telegram's parser, nothing lost, never longer."""

from __future__ import annotations

import re
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.telegram.format import markdown_to_plain, markdown_to_telegram_html
from tests.fakes.telegram_api import HtmlParseError, parse_telegram_html, utf16_len

FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def letters(text: str) -> str:
    """Only the letters and digits, in order: what a reader must still see."""
    return re.sub(r"[\W_]", "", text)


def is_subsequence(small: str, big: str) -> bool:
    it = iter(big)
    return all(ch in it for ch in small)


# Markdown as LLMs write it, plus the characters that break naive escaping.
piece = st.one_of(
    st.sampled_from(
        [
            "**", "*", "_", "__", "~~", "`", "```", "[", "]", "(", ")", "<", ">", "&", '"', "#", "# ", "> ",
            "- ", "1. ", "\n", "\n\n", " ", "snake_case", "2*3", "<b>", "&amp;", "&lt", "</i>",
            "[link](https://example.com/a?b=1&c=2)", "[bad](javascript:x)", "```python\n", "\n```\n",
            "`code <tag>`", "**bold *nested* text**", "中文", "😀", "é",
        ]
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
)
markdown = st.lists(piece, max_size=40).map("".join)


@settings(max_examples=400, deadline=None, database=None)
@given(text=markdown)
def test_html_is_always_accepted_by_telegram(text: str) -> None:
    rendered = markdown_to_telegram_html(text)
    visible = parse_telegram_html(rendered)  # raises HtmlParseError on anything Telegram refuses
    # Splitting happens on the markdown, before formatting: the visible text must not grow.
    assert utf16_len(visible) <= utf16_len(text)


@settings(max_examples=300, deadline=None, database=None)
@given(text=markdown)
def test_plain_keeps_every_letter_and_html_shows_a_subsequence(text: str) -> None:
    plain = markdown_to_plain(text)
    # Fence lines are markup (their info string goes); every other letter stays, in order.
    assert is_subsequence(letters(plain), letters(text))
    without_fences = "\n".join(line for line in text.split("\n") if not FENCE_LINE.match(line))
    assert is_subsequence(letters(without_fences), letters(plain))
    shown = parse_telegram_html(markdown_to_telegram_html(text))
    # Link urls are hidden behind their label in HTML; nothing else is lost.
    assert is_subsequence(letters(shown), letters(plain))


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("**bold** and __also__", "<b>bold</b> and <b>also</b>"),
        ("*it* and _it_", "<i>it</i> and <i>it</i>"),
        ("***both***", "<b><i>both</i></b>"),
        ("~~gone~~", "<s>gone</s>"),
        ("use `a < b` here", "use <code>a &lt; b</code> here"),
        ("``x ` y``", "<code>x ` y</code>"),
        ("snake_case_name and 2*3*4", "snake_case_name and 2*3*4"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("<b>not a tag</b>", "&lt;b&gt;not a tag&lt;/b&gt;"),
        ("# Title", "<b>Title</b>"),
        ("### Sub title ###", "<b>Sub title</b>"),
        ("- one\n- two\n1. three", "- one\n- two\n1. three"),
        ("[docs](https://ex.com/?q=1&x=\"y\")", '<a href="https://ex.com/?q=1&amp;x=&quot;y&quot;">docs</a>'),
        ("[evil](javascript:alert)", "[evil](javascript:alert)"),
        ("> quoted *word*\n> next", "<blockquote>quoted <i>word</i>\nnext</blockquote>"),
        ("```python\nif a<b:\n    pass\n```", '<pre><code class="language-python">if a&lt;b:\n    pass</code></pre>'),
        ("```\nplain & simple\n```", "<pre>plain &amp; simple</pre>"),
        ("```js\nnever closed", '<pre><code class="language-js">never closed</code></pre>'),
        ("**unclosed bold", "**unclosed bold"),
        ("**a `**` b**", "<b>a <code>**</code> b</b>"),
        ("```a`b is no fence", "```a`b is no fence"),
    ],
)
def test_markdown_to_html_examples(markdown: str, html: str) -> None:
    assert markdown_to_telegram_html(markdown) == html
    parse_telegram_html(html)


@pytest.mark.parametrize(
    ("markdown", "plain"),
    [
        ("**bold** _it_ `code`", "bold it code"),
        ("# Title\n- item", "Title\n- item"),
        ("[docs](https://ex.com)", "docs (https://ex.com)"),
        ("```py\nx = 1\n```\nafter", "x = 1\nafter"),
        ("a < b & c", "a < b & c"),
    ],
)
def test_markdown_to_plain_examples(markdown: str, plain: str) -> None:
    assert markdown_to_plain(markdown) == plain


@pytest.mark.parametrize(
    "bad",
    ["<b>open", "<i>x</b>", "</b>", "<foo>x</foo>", "a & b", "<code><b>x</b></code>", '<span class="x">s</span>'],
)
def test_the_fake_refuses_what_telegram_refuses(bad: str) -> None:
    """The validator the other tests trust must be able to say no."""
    with pytest.raises(HtmlParseError):
        parse_telegram_html(bad)


@pytest.mark.parametrize(
    "line",
    ["*" * 4096, "**" * 1000 + "x" + "**" * 1000, "*a " * 1300, "` " * 2000, "[" * 2000 + "x" + "](https://e.com)" * 50],
)
def test_pathological_lines_render_validly(line: str) -> None:
    """Deep nesting is capped (no RecursionError) and the output still parses."""
    visible = parse_telegram_html(markdown_to_telegram_html(line))
    assert utf16_len(visible) <= utf16_len(line)
