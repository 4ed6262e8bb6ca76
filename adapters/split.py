"""Split a long reply into parts that fit a platform's message limit, never breaking a code fence.

`split_message` is pure: it works on the markdown source, before any platform formatting, so a
channel splits first and formats each part afterwards.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["split_message"]

# A fence line: up to three spaces of indentation, then ``` or ~~~ (three or more), then an info
# string. A backtick fence's info string may not hold a backtick (CommonMark), else it is text.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# Text that would turn into a fence line if a cut put it at the start of a line.
_FENCE_AHEAD = re.compile(r"[ \t]{0,3}(```|~~~)")
_SENTENCE_END = re.compile(r"[.!?](?=[ \t])|[。！？]")
_SPACE_RUN = re.compile(r"[ \t]+")
# Characters that belong to the character before them: a cut just before them splits a glyph.
_JOINERS = frozenset("\u200d\ufe0e\ufe0f") | frozenset(chr(c) for c in range(0x1F3FB, 0x1F400))


class _Level(IntEnum):
    """Where a cut falls, best first."""

    PARAGRAPH = 0
    LINE = 1
    SENTENCE = 2
    WORD = 3
    CODE_LINE = 4


class _LineKind(IntEnum):
    PROSE = 0
    OPEN = 1
    CODE = 2
    CLOSE = 3


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int  # index of the line's "\n", or len(text) for the last line
    kind: _LineKind
    blank: bool
    opener: int  # index of the OPEN line of the block this line belongs to, or -1


@dataclass(frozen=True, slots=True)
class _Cut:
    level: int
    end: int  # the part is text[start:end] (right-stripped)
    next_start: int  # where the following part starts


def split_message(text: str, limit: int, *, measure: Callable[[str], int] = len) -> list[str]:
    """Split `text` into parts with `measure(part) <= limit`, in order, none of them empty.

    Cut preference: paragraph (blank line or block edge) > line > sentence end (. ! ? followed by
    a space, or 。！？) > word > hard cut. A cut only goes inside a fenced code block when no
    cut outside one is available in the second half of the window and the block could not move
    whole to the next part; then the part closes the fence and the next reopens it with the same
    opener line (``` plus language), so every part has balanced fences. Whitespace at cut points
    is dropped; everything else, in order, is kept. `measure` must grow with the string (e.g.
    `len`, or `lambda s: len(s.encode())` for a byte limit).

    Raises:
        ValueError: `limit` cannot hold one character plus the fence lines a cut may need.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    return _Splitter(text, limit, measure).run()


class _Splitter:
    """One split run: the text's line map and the greedy cut loop."""

    def __init__(self, text: str, limit: int, measure: Callable[[str], int]) -> None:
        self.text = text
        self.limit = limit
        self.measure = measure
        self.lines = _scan_lines(text)
        self.starts = [line.start for line in self.lines]
        markers = [self._marker(i) for i, line in enumerate(self.lines) if line.kind == _LineKind.OPEN]
        self.reserve = "\n" + max(markers, key=len) if markers else ""

    def run(self) -> list[str]:
        """Cut parts greedily from the front until the text is used up."""
        parts: list[str] = []
        n = len(self.text)
        start = self._skip_blank_lines(0)
        while start < n:
            prefix = self._prefix(start)
            if self._window(prefix, start, "") == n - start:
                last = self._build(prefix, start, n)
                if self.measure(last) <= self.limit:
                    if self.text[start:n].strip():
                        parts.append(last)
                    break
            cut, part = self._next_part(prefix, start)
            if self.text[start : cut.end].strip():
                parts.append(part)
            start = self._skip_blank_lines(cut.next_start)
        return parts

    # -- one part -----------------------------------------------------------------------------

    def _next_part(self, prefix: str, start: int) -> tuple[_Cut, str]:
        """Pick the best cut in the widest window that fits, shrinking it if the part runs over."""
        wend = start + self._window(prefix, start, self.reserve)
        while True:
            if wend <= start:
                raise ValueError(f"limit {self.limit} is too small for this text")
            cut = self._choose_cut(start, wend)
            part = self._build(prefix, start, cut.end)
            if self.measure(part) <= self.limit:
                return cut, part
            wend = cut.end - 1

    def _window(self, prefix: str, start: int, suffix: str) -> int:
        """Largest m with measure(prefix + text[start:start+m] + suffix) <= limit.

        Galloping then binary search, so each probe measures about one part, not the whole rest.
        """
        rest = len(self.text) - start

        def fits(m: int) -> bool:
            return self.measure(prefix + self.text[start : start + m] + suffix) <= self.limit

        lo, hi = 0, min(rest, self.limit)
        while hi < rest and fits(hi):
            lo, hi = hi, min(rest, hi * 2)
        if hi == rest and fits(hi):
            return rest
        hi -= 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _build(self, prefix: str, start: int, end: int) -> str:
        """The part text[start:end] with its reopened fence in front and closing fence behind."""
        body = self.text[start:end].rstrip()
        opener = self._open_block_at_end(end)
        suffix = "\n" + self._marker(opener) if opener >= 0 else ""
        return prefix + body + suffix

    def _prefix(self, start: int) -> str:
        """The fence line to reopen when a part starts inside a code block, with its newline."""
        line = self.lines[self._line_at(start)]
        if line.kind != _LineKind.CODE:
            return ""
        reopen = self.text[self.lines[line.opener].start : self.lines[line.opener].end].strip()
        # A long info string must not eat the part: fall back to the bare marker.
        if self.measure(reopen + "\n" + self.reserve) >= self.limit:
            reopen = self._marker(line.opener)
        return reopen + "\n"

    # -- cut points ---------------------------------------------------------------------------

    def _choose_cut(self, start: int, wend: int) -> _Cut:
        """Best cut in (start, wend]: prefer the better level, then the later position."""
        cands = list(self._candidates(start, wend))
        half = start + (wend - start) // 2

        def best(levels: range, floor: int) -> _Cut | None:
            for level in levels:
                found = [c for c in cands if c.level == level and c.end >= floor]
                if found:
                    return max(found, key=lambda c: c.end)
            return None

        outside = range(_Level.PARAGRAPH, _Level.CODE_LINE)
        every = range(_Level.PARAGRAPH, _Level.CODE_LINE + 1)
        return (
            best(outside, half)
            or self._before_block(start, wend, cands)
            or best(every, half)
            or best(every, start + 1)
            or self._hard_cut(start, wend)
        )

    def _candidates(self, start: int, wend: int) -> Iterator[_Cut]:
        """Every cut at a line boundary, sentence end or space with start < end <= wend."""
        lines = self.lines
        first, last = self._line_at(start), self._line_at(wend)
        for k in range(first, last + 1):
            line = lines[k]
            if line.kind == _LineKind.PROSE and not line.blank:
                lo, hi = max(start, line.start), min(wend, line.end - 1)
                yield from self._inline_candidates(line, lo, hi)
            if not (start < line.end <= wend) or k + 1 >= len(lines):
                continue
            nxt = lines[k + 1]
            if line.kind in (_LineKind.OPEN, _LineKind.CODE):
                # Only between two code lines: a cut next to a fence would leave an empty block.
                if line.kind == _LineKind.CODE and nxt.kind == _LineKind.CODE:
                    yield _Cut(_Level.CODE_LINE, line.end, line.end + 1)
                continue
            edge = line.blank or nxt.blank or nxt.kind == _LineKind.OPEN or line.kind == _LineKind.CLOSE
            level = _Level.PARAGRAPH if edge else _Level.LINE
            yield _Cut(level, line.end, self._skip_blank_lines(line.end + 1))

    def _inline_candidates(self, line: _Line, lo: int, hi: int) -> Iterator[_Cut]:
        """Sentence ends and spaces inside one prose line, within [lo, hi] (only the window is
        scanned, so a huge single line costs one window per part)."""
        text = self.text
        # One character of context each side: the lookahead after ".", and a run reaching lo.
        pos, endpos = max(line.start, lo - 1), min(line.end, hi + 2)
        for m in _SENTENCE_END.finditer(text, pos, endpos):
            end = m.end()
            if lo < end <= hi:
                nxt = self._after_spaces(end, line)
                if nxt is not None:
                    yield _Cut(_Level.SENTENCE, end, nxt)
        for m in _SPACE_RUN.finditer(text, pos, endpos):
            end = m.start()
            if end > line.start and lo < end <= hi:
                nxt = self._after_spaces(m.end(), line)
                if nxt is not None:
                    yield _Cut(_Level.WORD, end, nxt)

    def _after_spaces(self, pos: int, line: _Line) -> int | None:
        """Where the next part starts after a cut inside a line; None if that start is unsafe."""
        while pos < line.end and self.text[pos] in " \t":
            pos += 1
        if pos >= line.end:
            return self._skip_blank_lines(line.end + 1) if line.end < len(self.text) else len(self.text)
        # Text such as "```" mid-line would become a fence line at the start of the next part.
        if _FENCE_AHEAD.match(self.text, pos):
            return None
        return pos

    def _before_block(self, start: int, wend: int, cands: list[_Cut]) -> _Cut | None:
        """The cut just before a code block that the window ends inside, if the block fits whole."""
        k = self._line_at(wend)
        opener = self.lines[k].opener
        if opener < 0 or self.lines[opener].start <= start:
            return None
        close = next((j for j in range(opener + 1, len(self.lines)) if self.lines[j].opener != opener), len(self.lines))
        block = self.text[self.lines[opener].start : self.lines[close - 1].end]
        if self.measure(block + self.reserve) > self.limit:
            return None
        edge = self.lines[opener].start - 1
        return next((c for c in cands if c.end == edge), None)

    def _hard_cut(self, start: int, wend: int) -> _Cut:
        """Cut inside a line, at the latest point that splits no glyph and makes no fence."""
        text = self.text
        for p in range(wend, start, -1):
            line = self.lines[self._line_at(p)]
            if not (line.start < p < line.end) or line.kind in (_LineKind.OPEN, _LineKind.CLOSE):
                continue
            if text[p] in _JOINERS or unicodedata.combining(text[p]) or text[p - 1] == "\u200d":
                continue
            if _FENCE_AHEAD.match(text, p):
                continue
            return _Cut(_Level.CODE_LINE + 1, p, p)
        # Nothing safe (e.g. one fence line longer than the limit): cut where the window ends.
        return _Cut(_Level.CODE_LINE + 1, wend, wend)

    # -- line map ------------------------------------------------------------------------------

    def _line_at(self, pos: int) -> int:
        """Index of the line holding pos (a line's end, its newline, belongs to it)."""
        return bisect_right(self.starts, pos) - 1

    def _skip_blank_lines(self, pos: int) -> int:
        """From a line start in prose, skip whole blank lines (indentation of the next line stays)."""
        k = self._line_at(pos)
        if pos >= len(self.text) or self.lines[k].start != pos:
            return pos
        while k < len(self.lines) and self.lines[k].kind == _LineKind.PROSE and self.lines[k].blank:
            k += 1
        return self.lines[k].start if k < len(self.lines) else len(self.text)

    def _open_block_at_end(self, end: int) -> int:
        """The OPEN line index of the block a part ending at `end` leaves open, or -1."""
        line = self.lines[self._line_at(end)]
        if line.kind == _LineKind.CODE or (line.kind == _LineKind.OPEN and end == line.end):
            return line.opener
        return -1

    def _marker(self, opener: int) -> str:
        line = self.lines[opener]
        m = _FENCE.match(self.text[line.start : line.end])
        assert m is not None, "an OPEN line always matches the fence pattern"
        return m.group(1)


def _scan_lines(text: str) -> list[_Line]:
    """Classify each line as prose, fence opener, code or fence closer (CommonMark fences)."""
    lines: list[_Line] = []
    pos = 0
    opener = -1
    marker = ""
    for raw in text.split("\n"):
        end = pos + len(raw)
        m = _FENCE.match(raw)
        if opener < 0:
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                opener, marker = len(lines), m.group(1)
                kind = _LineKind.OPEN
            else:
                kind = _LineKind.PROSE
        elif m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) and not m.group(2).strip():
            kind = _LineKind.CLOSE
        else:
            kind = _LineKind.CODE
        lines.append(_Line(pos, end, kind, not raw.strip(), opener))
        if kind == _LineKind.CLOSE:
            opener = -1
        pos = end + 1
    return lines
