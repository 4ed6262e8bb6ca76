"""/pulse in chat: one space's Memory Pulse (memory.store.pulse, the same SQL as the API's
/api/v1/pulse) as a short text summary and as a bar chart PNG, stacked by category.

The chart's colours are the emoji squares the summary uses as its legend, so the caption explains
the picture on Telegram; channels that cannot show a photo send the same summary as text.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from bot.turn.views.png import encode_rgb
from memory.store.pulse import Pulse

PERIODS = {"7d": 7, "30d": 30}
# (legend emoji, RGB): the first categories by count get a colour each, the rest are "other".
PALETTE = (("🟦", (59, 130, 246)), ("🟧", (249, 115, 22)), ("🟩", (34, 197, 94)), ("🟥", (239, 68, 68)),
           ("🟪", (168, 85, 247)))
OTHER = ("⬜", (170, 170, 170))
NO_CATEGORY = "none"          # memory.store.pulse's name for memories without a category
WIDTH, HEIGHT, MARGIN, AXIS = 640, 320, 16, 24
BACKGROUND, INK, GRID = (255, 255, 255), (60, 60, 60), (230, 230, 230)

# 3x5 digits, one string of rows per glyph ('#' = ink): the axis labels are numbers only.
DIGITS = {str(d): g for d, g in enumerate((
    "####.##.##.####", ".#.##..#..#.###", "###..#####..###", "###..####..####", "#.##.####..#..#",
    "####..###..####", "####..####.####", "###..#..#..#..#", "####.#####.####", "####.####..####"))}


def parse_period(args: str) -> int | None:
    """'' -> 7 days, '7d' / '30d' -> that many; anything else -> None (the caller shows usage)."""
    word = args.strip().lower()
    return 7 if not word else PERIODS.get(word)


def window(now: datetime, days: int) -> tuple[datetime, datetime]:
    """[since, until): the last `days` calendar days including today (UTC day boundaries)."""
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days - 1), today + timedelta(days=1)


def top_categories(p: Pulse) -> list[tuple[str, int]]:
    """Categories by count over the whole window, most first (ties by name)."""
    total: Counter[str] = Counter()
    for b in p.buckets:
        total.update(b.by_category)
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))


def _label(category: str) -> str:
    return "uncategorised" if category == NO_CATEGORY else category


def legend(p: Pulse) -> dict[str, tuple[str, tuple[int, int, int]]]:
    """category -> (emoji, colour): the first five by count, everything else 'other'."""
    return {c: PALETTE[i] if i < len(PALETTE) else OTHER for i, (c, _) in enumerate(top_categories(p))}


def pulse_text(p: Pulse, days: int, *, with_days: bool = True) -> str:
    """The summary: total, counts per day (7 days: every day; 30 days: active days), top categories and tags."""
    if p.total == 0:
        return f"Memory pulse, last {days} days: nothing new remembered."
    lines = [f"Memory pulse, last {days} days: {p.total} new {'memory' if p.total == 1 else 'memories'}."]
    if with_days:
        peak = max(b.count for b in p.buckets)
        for b in p.buckets:
            if b.count or days <= 7:
                bar = "▇" * max(1 if b.count else 0, round(8 * b.count / peak))
                lines.append(f"{b.start:%a %m-%d}  {bar + ' ' if bar else ''}{b.count}")
    colours = legend(p)
    cats = top_categories(p)[:6]
    lines.append("Top categories: " + ", ".join(f"{colours[c][0]} {_label(c)} {n}" for c, n in cats))
    if p.top_tags:
        lines.append("Top tags: " + ", ".join(f"#{t} {n}" for t, n in p.top_tags[:6]))
    return "\n".join(lines)


def _rect(rows: list[bytearray], x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
    """Fill [x0, x1) x [y0, y1), clipped to the image."""
    x0, x1 = max(0, x0), min(len(rows[0]) // 3, x1)
    px = bytes(rgb) * max(0, x1 - x0)
    for y in range(max(0, y0), min(len(rows), y1)):
        rows[y][3 * x0:3 * x1] = px


def _number(rows: list[bytearray], x: int, y: int, text: str, scale: int = 2) -> None:
    """Digits at (x, y), top-left, each glyph 3x5 cells of `scale` pixels."""
    for i, ch in enumerate(text):
        glyph = DIGITS.get(ch)
        if glyph is None:
            continue
        for cell, on in enumerate(glyph):
            if on == "#":
                cx, cy = x + (i * 4 + cell % 3) * scale, y + (cell // 3) * scale
                _rect(rows, cx, cy, cx + scale, cy + scale, INK)


def pulse_png(p: Pulse) -> bytes:
    """A bar per bucket, stacked by category in the legend's colours, with the peak and day numbers."""
    rows = [bytearray(bytes(BACKGROUND) * WIDTH) for _ in range(HEIGHT)]
    left, right, top, bottom = MARGIN + AXIS + 8, WIDTH - MARGIN, MARGIN, HEIGHT - MARGIN - AXIS
    peak = max((b.count for b in p.buckets), default=0) or 1
    for frac in (0.25, 0.5, 0.75, 1.0):
        y = bottom - round(frac * (bottom - top))
        _rect(rows, left, y, right, y + 1, GRID)
    _number(rows, MARGIN, top, str(peak))
    _number(rows, MARGIN, bottom - 10, "0")
    colours = legend(p)
    n = max(1, len(p.buckets))
    slot = (right - left) / n
    bar = max(1, int(slot * 0.7))
    label_every = 1 if n <= 10 else 5
    for i, b in enumerate(p.buckets):
        x0 = left + int(i * slot + (slot - bar) / 2)
        y = bottom
        for cat, count in sorted(b.by_category.items(), key=lambda kv: (-kv[1], kv[0])):
            h = round(count * (bottom - top) / peak)
            _rect(rows, x0, y - h, x0 + bar, y, colours.get(cat, OTHER)[1])
            y -= h
        if i % label_every == 0 or i == n - 1:
            _number(rows, x0, bottom + 8, f"{b.start.day}")
    _rect(rows, left, bottom, right, bottom + 1, INK)
    return encode_rgb(WIDTH, HEIGHT, rows)
