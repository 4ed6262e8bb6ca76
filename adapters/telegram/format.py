"""Markdown (as LLMs write it) to Telegram's HTML parse mode, and to plain text for the fallback.

Telegram's HTML mode knows a handful of tags (b, i, s, code, pre, a, blockquote, ...) and only
the entities &lt; &gt; &amp; &quot;; anything else fails the whole message with "can't parse
entities". So everything that is not markup we produce is escaped, and tags are only emitted in
pairs by construction (each span is rendered from its own substring).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Protocol

__all__ = ["markdown_to_plain", "markdown_to_telegram_html"]

# Same fence rule as adapters.split: a backtick fence's info string holds no backtick.
_FENCE = re.compile(r"^ {0,3}(?:(`{3,})[ \t]*([^`\s]*)[^`]*|(~{3,})[ \t]*(\S*).*)$")
_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^()\s]+)\)")
_SAFE_URL = re.compile(r"^(?:https?://|tg://|mailto:)", re.IGNORECASE)
_LANG = re.compile(r"^[A-Za-z0-9_+#.-]{1,32}$")
# Emphasis delimiters, longest first so "**" is not read as two "*".
_DELIMS = ("**", "__", "~~", "*", "_")
_TAGS = {"**": "b", "__": "b", "~~": "s", "*": "i", "_": "i"}


def markdown_to_telegram_html(text: str) -> str:
    """Render markdown as Telegram HTML: bold, italic, strike, inline and fenced code, links,
    headings (as bold), blockquotes; lists and everything else stay as escaped text."""
    return _render_blocks(text, _Html())


def markdown_to_plain(text: str) -> str:
    """Strip markdown markup for a plain-text message: code fences and emphasis markers go,
    links become "label (url)", the words stay."""
    return _render_blocks(text, _Plain())


class _Renderer(Protocol):
    def text(self, s: str) -> str: ...
    def code(self, s: str) -> str: ...
    def span(self, tag: str, inner: str) -> str: ...
    def link(self, url: str, inner: str) -> str: ...
    def pre(self, lang: str, code: str) -> str: ...
    def heading(self, inner: str) -> str: ...
    def quote(self, inner: str) -> str: ...


@dataclass(frozen=True, slots=True)
class _Html:
    def text(self, s: str) -> str:
        return html.escape(s, quote=False)

    def code(self, s: str) -> str:
        return f"<code>{html.escape(s, quote=False)}</code>"

    def span(self, tag: str, inner: str) -> str:
        return f"<{tag}>{inner}</{tag}>"

    def link(self, url: str, inner: str) -> str:
        return f'<a href="{html.escape(url, quote=True)}">{inner}</a>'

    def pre(self, lang: str, code: str) -> str:
        body = html.escape(code, quote=False)
        if lang:
            return f'<pre><code class="language-{lang}">{body}</code></pre>'
        return f"<pre>{body}</pre>"

    def heading(self, inner: str) -> str:
        return f"<b>{inner}</b>"

    def quote(self, inner: str) -> str:
        return f"<blockquote>{inner}</blockquote>"


@dataclass(frozen=True, slots=True)
class _Plain:
    def text(self, s: str) -> str:
        return s

    def code(self, s: str) -> str:
        return s

    def span(self, tag: str, inner: str) -> str:
        return inner

    def link(self, url: str, inner: str) -> str:
        return inner if inner == url else f"{inner} ({url})"

    def pre(self, lang: str, code: str) -> str:
        return code

    def heading(self, inner: str) -> str:
        return inner

    def quote(self, inner: str) -> str:
        return "\n".join("> " + line for line in inner.split("\n"))


def _render_blocks(text: str, r: _Renderer) -> str:
    """Walk the lines: fenced code and blockquotes are blocks; other lines render inline."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            marker = fence.group(1) or fence.group(3)
            lang = fence.group(2) if fence.group(1) else fence.group(4)
            j = i + 1
            while j < len(lines) and not _closes(lines[j], marker):
                j += 1
            out.append(r.pre(lang if _LANG.match(lang) else "", "\n".join(lines[i + 1 : j])))
            i = j + 1
            continue
        if _QUOTE.match(line):
            j = i
            quoted: list[str] = []
            while j < len(lines) and (m := _QUOTE.match(lines[j])):
                quoted.append(_render_inline(m.group(1), r))
                j += 1
            out.append(r.quote("\n".join(quoted)))
            i = j
            continue
        heading = _HEADING.match(line)
        out.append(r.heading(_render_inline(heading.group(1), r)) if heading else _render_inline(line, r))
        i += 1
    return "\n".join(out)


def _closes(line: str, marker: str) -> bool:
    """A closing fence: the opener's character, at least as many, nothing after."""
    m = _CLOSE.match(line)
    return bool(m) and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker)


def _render_inline(s: str, r: _Renderer) -> str:
    """Render one line's spans: `code`, [label](url), **bold**, __bold__, ~~strike~~, *it*, _it_."""
    return _Inline(s, r).render(0, len(s), 0)


class _Inline:
    """One line's spans. Code spans and emphasis closers are found once per line, so rendering
    is O(n log n) even for lines full of unmatched delimiters; nesting is capped."""

    MAX_DEPTH = 6

    def __init__(self, s: str, r: _Renderer) -> None:
        self.s = s
        self.r = r
        self.code = _code_spans(s)
        self.closers = {d: _closers(s, d, self.code) for d in _DELIMS}

    def render(self, lo: int, hi: int, depth: int) -> str:
        """Render s[lo:hi]; spans never cross hi."""
        s, r = self.s, self.r
        out: list[str] = []
        plain_from = i = lo
        while i < hi:
            c = s[i]
            span: tuple[int, str] | None = None  # (end index, rendered)
            if c == "`":
                end = self.code.get(i)
                if end is None or end[0] > hi:
                    # An unmatched backtick run is literal as a whole, not a shorter run plus text.
                    i = _run_end(s, i, hi)
                    continue
                span = (end[0], r.code(s[end[1] : end[2]]))
            elif c == "[" and depth < self.MAX_DEPTH:
                m = _LINK.match(s, i, hi)
                if m and _SAFE_URL.match(m.group(2)):
                    span = (m.end(), r.link(m.group(2), self.render(m.start(1), m.end(1), depth + 1)))
            elif c in "*_~" and depth < self.MAX_DEPTH:
                span = self._emphasis(i, hi, depth)
            if span is None:
                i += 1
                continue
            if i > plain_from:
                out.append(r.text(s[plain_from:i]))
            out.append(span[1])
            i = plain_from = span[0]
        if hi > plain_from:
            out.append(r.text(s[plain_from:hi]))
        return "".join(out)

    def _emphasis(self, i: int, hi: int, depth: int) -> tuple[int, str] | None:
        """A delimiter that opens (not before a space) up to its first closer before hi."""
        s = self.s
        delim = next((d for d in _DELIMS if s.startswith(d, i)), None)
        if delim is None:
            return None
        k = len(delim)
        start = i + k
        if start >= hi or s[start].isspace():
            return None
        # snake_case and 2*3*4 are words, not emphasis: "_" and "*" must not sit inside a word.
        if delim[0] in "_*" and i > 0 and s[i - 1].isalnum():
            return None
        closers = self.closers[delim]
        at = bisect_right(closers, start)
        if at == len(closers) or closers[at] + k > hi:
            return None
        j = closers[at]
        return j + k, self.r.span(_TAGS[delim], self.render(start, j, depth + 1))


def _run_end(s: str, i: int, hi: int) -> int:
    """Index just past the run of the character at s[i]."""
    ch = s[i]
    while i < hi and s[i] == ch:
        i += 1
    return i


def _code_spans(s: str) -> dict[int, tuple[int, int, int]]:
    """Code spans by start index: (end, content start, content end). A run of k backticks ends
    at the next run of exactly k backticks."""
    runs: list[tuple[int, int]] = []  # (start, length), in order
    i = 0
    while (i := s.find("`", i)) >= 0:
        end = _run_end(s, i, len(s))
        runs.append((i, end - i))
        i = end
    by_length: dict[int, list[int]] = {}  # run length -> indices into runs
    for n, (_, k) in enumerate(runs):
        by_length.setdefault(k, []).append(n)
    spans: dict[int, tuple[int, int, int]] = {}
    n = 0
    while n < len(runs):
        start, k = runs[n]
        same = by_length[k]
        at = bisect_right(same, n)
        if at == len(same):
            n += 1
            continue
        close = runs[same[at]][0]
        spans[start] = (close + k, start + k, close)
        n = same[at] + 1
    return spans


def _closers(s: str, delim: str, code: dict[int, tuple[int, int, int]]) -> list[int]:
    """Sorted indices where `delim` can close: not after a space, not inside a word (for _ and
    *), not inside a code span; in "***x***" the closer of "**" is the run's last two stars."""
    k = len(delim)
    ch = delim[0]
    inside = sorted((a, b[0]) for a, b in code.items())
    found: list[int] = []
    i = s.find(ch)
    while i >= 0:
        end = _run_end(s, i, len(s))
        candidates = range(i, end - k + 1) if k == 1 else ([end - k] if end - i >= k else [])
        for pos in candidates:
            if pos == 0 or s[pos - 1].isspace():
                continue
            if ch in "_*" and pos + k < len(s) and s[pos + k].isalnum():
                continue
            at = bisect_right(inside, (pos, len(s) + 1)) - 1
            if at >= 0 and inside[at][0] <= pos < inside[at][1]:
                continue
            found.append(pos)
        i = s.find(ch, end)
    return found
