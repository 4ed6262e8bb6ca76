"""Markdown to readable plain text, for channels that show markup characters raw (WeChat)."""

from __future__ import annotations

import re

__all__ = ["markdown_to_plain"]

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_QUOTE = re.compile(r"^ {0,3}>[ \t]?(.*)$")

# Spans the inline pass must not touch: code spans (`x`, ``x``) and backslash escapes.
_PROTECTED = re.compile(r"(?P<ticks>`+)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)|\\(?P<esc>[!-/:-@\[-`{-~])")
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(([^()\s]+)\)")
_LINK = re.compile(r"\[([^\]\n]*)\]\(([^()\s]+)\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto|ftp):[^<>\s]+)>")
_STRONG_STAR = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_STRONG_UNDER = re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_EM_STAR = re.compile(r"(?<!\*)\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)")
_EM_UNDER = re.compile(r"(?<!\w)_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")

RULE_TEXT = "──────────"
BULLET = "• "


def markdown_to_plain(text: str) -> str:
    """Turn Markdown into plain text that reads well where markup is shown raw.

    Headings lose their `#`, emphasis (`**b**`, `*i*`, `__b__`, `_i_`, `~~s~~`) loses its
    markers, links become "text (url)", images "alt (url)", `<url>` becomes url, inline code loses
    its backticks, code fences are dropped while the code inside is kept verbatim (a fence's
    language, if any, stays as a "[lang]" line), bullets become "• ", tables lose their
    separator row and outer pipes, rules become a line of box characters, and backslash escapes
    are resolved. Every letter and digit of the input is kept, in order; it never raises.
    """
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is not None:
            if _closes(line, fence):
                fence = None
            else:
                out.append(line)
            continue
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            fence = opened.group(1)
            info = opened.group(2).strip()
            if info:
                out.append(f"[{info}]")
            continue
        plain = _block_line(line, out)
        if plain is not None:
            out.append(plain)
    return "\n".join(out)


def _closes(line: str, fence: str) -> bool:
    """A closing fence: the same character, at least as long, nothing after it."""
    m = _FENCE_OPEN.match(line)
    return bool(m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip())


def _block_line(line: str, done: list[str]) -> str | None:
    """One line outside code fences, by its block kind; None drops a markup-only line."""
    previous = done[-1] if done else ""
    if _SETEXT_UNDERLINE.match(line) and previous.strip():
        # "Title\n====" or "Title\n----": the heading's underline, not a rule.
        return None
    if _RULE.match(line):
        return RULE_TEXT
    stripped = line.strip()
    if "|" in stripped and "-" in stripped and not stripped.strip("|-: \t"):
        return None  # a table's header separator row
    heading = _ATX_HEADING.match(line)
    if heading:
        return _inline(heading.group(1) or "")
    quote = _QUOTE.match(line)
    if quote:
        return "> " + _inline(quote.group(1))
    bullet = _BULLET.match(line)
    if bullet:
        return bullet.group(1) + BULLET + _inline(bullet.group(2))
    if len(stripped) > 1 and stripped.startswith("|") and stripped.endswith("|"):
        return " | ".join(_inline(cell.strip()) for cell in _cells(stripped[1:-1]))
    return _inline(line.rstrip())


def _cells(row: str) -> list[str]:
    """Split a table row on "|", except inside code spans and after a backslash."""
    cells, start, pos = [], 0, 0
    while pos < len(row):
        m = _PROTECTED.match(row, pos)
        if m:
            pos = m.end()
        elif row[pos] == "|":
            cells.append(row[start:pos])
            start = pos = pos + 1
        else:
            pos += 1
    cells.append(row[start:])
    return cells


def _inline(text: str) -> str:
    """Inline markup of one line; code spans and escapes pass through untouched."""
    pieces: list[str] = []
    pos = 0
    for m in _PROTECTED.finditer(text):
        pieces.append(_inline_markup(text[pos : m.start()]))
        pieces.append(m.group("code") if m.group("ticks") else m.group("esc"))
        pos = m.end()
    pieces.append(_inline_markup(text[pos:]))
    return "".join(pieces)


def _inline_markup(text: str) -> str:
    """Links, images and emphasis in a stretch of text that holds no code span."""
    text = _IMAGE.sub(_link_text, text)
    text = _LINK.sub(_link_text, text)
    text = _AUTOLINK.sub(r"\1", text)
    for pattern in (_STRONG_STAR, _STRONG_UNDER, _STRIKE, _EM_STAR, _EM_UNDER):
        text = pattern.sub(r"\1", text)
    return text


def _link_text(m: re.Match[str]) -> str:
    label, url = m.group(1).strip(), m.group(2)
    return f"{label} ({url})" if label else url
