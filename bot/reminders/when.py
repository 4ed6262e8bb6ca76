"""WHEN phrases -> the exact local date and time a reminder is due, in English and Chinese.

`parse_reminder("tomorrow 9:00 call mum", now, zone)` reads the WHEN at the start (or, failing
that, at the end) of a `/remind` text and returns `Understood(schedule, when, what)`, or
`Unclear(kind, ...)` when the bot must ask: no time of day ("tomorrow"), am or pm ("at 9",
"明天3点"), day or month ("3/4"), a time already past, or nothing it can read. `parse_when` reads
a WHEN alone (the agent's tool passes it apart from WHAT; an ISO 8601 time is read too).

Our own rules (bot/reminders/phrases.py) read the phrases people use for reminders, and every
Chinese one; dateparser, where it parses well (English dates such as "December 24 at 6pm"), reads
what they do not. Pure: `now` and the zone are arguments, no clock is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from bot.reminders.phrases import FILLER, READERS, SPACE, Parts
from bot.reminders.schedule import Schedule, first_occurrence, wall

UnclearKind = Literal["no_time", "am_pm", "day_month", "past", "bad_date", "unknown", "no_what"]


@dataclass(frozen=True, slots=True)
class Understood:
    schedule: Schedule
    when: str      # the words read as WHEN
    what: str      # the rest: what to remind of


@dataclass(frozen=True, slots=True)
class Unclear:
    """The bot asks: `options` are the readings it hesitates between (or the past time it read)."""

    kind: UnclearKind
    when: str = ""
    what: str = ""
    options: tuple[Schedule, ...] = ()


Parsed = Understood | Unclear

# Full-width ASCII and the ideographic space, as their ASCII selves (one character for one,
# so positions in the normalised text are positions in the original).
_WIDE = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def normalise(text: str) -> str:
    """Lower case, ASCII digits and punctuation, same length as `text`."""
    text = text.translate(_WIDE)
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def scan(s: str, pos: int) -> tuple[int, Parts] | None:
    """Read WHEN pieces from `pos` on: where they end and what they say (None: none at `pos`)."""
    p, end = Parts(), pos
    while "relative" not in p.seen:
        at = SPACE.match(s, end).end()
        got = _read_one(s, at, p)
        if got is None:
            skip = FILLER.match(s, at)
            if skip is None or skip.end() == at:
                break
            got = _read_one(s, skip.end(), p)
            if got is None:
                break
        end = got
    return (end, p) if p.seen else None


def _read_one(s: str, at: int, p: Parts) -> int | None:
    for name, reader in READERS:
        if name in p.seen:
            continue
        end = reader(s, at, p)
        if end is not None and end > at:
            p.seen.add(name)
            if name == "relative" and len(p.seen) > 1:  # "tomorrow in 2 hours": not one time
                p.seen.add("mixed")
            return end
    return None


def _hours(p: Parts) -> list[tuple[int, int]] | None:
    """The 24-hour readings of the hour as (hour, days to add); two when am/pm is unclear; None if invalid."""
    h = p.hour
    if h is None or not 0 <= h <= 24 or not 0 <= p.minute <= 59:
        return None
    if h == 24:
        return [(0, 1)] if p.minute == 0 else None
    if p.ampm is not None:
        if not 1 <= h <= 12:
            return None
        return [(h % 12 + (12 if p.ampm == "pm" else 0), 0)]
    period = p.period
    if period in ("morning", "early"):
        return [(0, 0) if h == 12 and period == "early" else (h, 0)]
    if period == "noon":
        return [(h if h >= 11 else h + 12, 0)] if h <= 12 else [(h, 0)]
    if period in ("afternoon", "evening"):
        return [(h + 12 if h < 12 else h, 0)]
    if period == "night":
        if h in (0, 12):
            return [(0, 1)]
        return [(h if h <= 5 else h + 12 if h < 12 else h, 0)]
    if p.clock24 or h == 0 or h > 12:
        return [(h, 0)]
    return [(h, 0), (h + 12, 0)] if h < 12 else [(12, 0), (0, 1)]


def days_named(p: Parts, today: date) -> list[date] | Unclear:
    """The day(s) the pieces name (none: today, moved to tomorrow later when the time passed)."""
    if p.ymd is not None:
        year, month, day = p.ymd
        readings = [(month, day)] if p.day_month_unsure is None else [(month, day), (day, month)]
        out = []
        for m, d in readings:
            try:
                at = date(year or today.year, m, d)
                if year is None and at < today:
                    at = date(today.year + 1, m, d)
            except ValueError:
                continue
            out.append(at)
        return out or Unclear("bad_date")
    if p.day_offset is not None:
        return [today + timedelta(days=p.day_offset)]
    if p.weekday is not None:
        ahead = (p.weekday - today.weekday()) % 7
        if p.week_mode == "next" and ahead == 0:
            ahead = 7
        elif p.week_mode == "next_week":
            ahead = 7 - today.weekday() + p.weekday
        elif p.week_mode == "this_week":
            ahead = p.weekday - today.weekday()
        return [today + timedelta(days=ahead)]
    return []


def resolve(p: Parts, now: datetime, zone: ZoneInfo) -> Schedule | Unclear:
    """The schedule the pieces name, read at `now` in `zone`, or what is unclear about it."""
    if "mixed" in p.seen:
        return Unclear("unknown")
    if p.delta is not None:
        return Schedule(first=now + p.delta, zone=zone.key)
    hours = _hours(p) if p.hour is not None else None
    if p.hour is None:
        return Unclear("no_time")
    if hours is None:
        return Unclear("bad_date")
    local_now = now.astimezone(zone)
    if p.every is not None:
        if p.every == "week" and p.weekday is None:
            return Unclear("unknown")
        options = tuple(Schedule(first_occurrence(p.every, h, p.minute, p.weekday or 0, zone, now), zone.key, p.every,  # type: ignore[arg-type]
                                 h, p.minute) for h, _ in hours)
        return options[0] if len(options) == 1 else Unclear("am_pm", options=options)
    days = days_named(p, local_now.date())
    if isinstance(days, Unclear):
        return days
    given = bool(days)
    readings: list[Schedule] = []
    for day in days or [local_now.date()]:
        for h, extra in hours:
            at = wall(day + timedelta(days=extra), h, p.minute, zone)
            if not given and at <= now:  # a time alone is the next one: tomorrow once today's passed
                at = wall(day + timedelta(days=extra + 1), h, p.minute, zone)
            elif p.weekday is not None and p.week_mode == "coming" and at <= now:  # "friday" on a Friday evening
                at = wall(day + timedelta(days=extra + 7), h, p.minute, zone)
            readings.append(Schedule(first=at, zone=zone.key))
    if p.day_month_unsure is not None and len({r.first for r in readings}) > 1:
        return Unclear("day_month", options=tuple(readings))
    ahead = [r for r in readings if r.first > now]
    if not ahead:
        return Unclear("past", options=tuple(readings[:1]))
    if len(ahead) == 1:
        return ahead[0]  # "today at 9" at 10:00 is 21:00: the other reading is past
    return Unclear("am_pm", options=tuple(sorted(ahead, key=lambda r: r.first)))


# What may stand between WHEN and WHAT, or start WHAT ("tomorrow 9:00 to call mum", "明天提醒我交报告").
_LEAD = re.compile(r"^(?:\s|[,，:：;；\-—]|(?:to|that|about|remind me(?: to)?)\b|提醒我|提醒|叫我|记得|要)+")
_END_PUNCT = " \t.!。！,，"


def clean_what(text: str) -> str:
    return _LEAD.sub("", text).strip()


def _starts(s: str) -> list[int]:
    """Where a WHEN at the end may start: after a space or comma, or at any CJK character."""
    return [i for i in range(1, len(s)) if s[i - 1] in " ,，" or ord(s[i]) > 0x2E7F or ord(s[i - 1]) > 0x2E7F]


def parse_reminder(text: str, now: datetime, zone: ZoneInfo) -> Parsed:
    """A `/remind` text: WHEN then WHAT ("in 10 minutes tea", "明天上午9点 交报告"), or WHAT then WHEN."""
    text = text.strip()
    s = normalise(text)
    found = scan(s, 0)
    if found is not None:
        when, what = text[:found[0]], text[found[0]:]
        p = found[1]
    else:
        found = next(((i, r) for i in _starts(s) if (r := scan(s, i)) is not None
                      and not s[r[0]:].strip(_END_PUNCT)), None)
        if found is None:
            return _library_prefix(text, s, now, zone)
        when, what, p = text[found[0]:], text[:found[0]], found[1][1]
    got = _done(resolve(p, now, zone), when.strip(" ,，"), clean_what(what))
    if isinstance(got, Unclear) and got.kind in ("bad_date", "unknown"):  # "24.12.2026 18:00": not ours to read
        library = _library_prefix(text, s, now, zone)
        if isinstance(library, Understood):
            return library
    return got


def parse_when(phrase: str, now: datetime, zone: ZoneInfo) -> Parsed:
    """A WHEN alone ("friday 15:00", "每周一早上8点", "2026-12-24T18:00"): all of it must be read."""
    phrase = phrase.strip()
    s = normalise(phrase)
    found = scan(s, 0)
    if found is not None and not s[found[0]:].strip(_END_PUNCT):
        return _done(resolve(found[1], now, zone), phrase, "")
    try:
        at = datetime.fromisoformat(phrase)
    except ValueError:
        return _library(phrase, now, zone) or Unclear("unknown", when=phrase)
    at = at.replace(tzinfo=zone) if at.tzinfo is None else at
    sched = Schedule(first=at.astimezone(zone), zone=zone.key)
    return _done(sched if sched.first > now else Unclear("past", options=(sched,)), phrase, "")


def _done(got: Schedule | Unclear, when: str, what: str) -> Parsed:
    if isinstance(got, Unclear):
        return Unclear(got.kind, when, what, got.options)
    return Understood(got, when, what)


_HAS_TIME = re.compile(r"\d[:.]\d\d|\d\s*[ap]\.?m\b|\bnoon\b|\bmidnight\b|\bat\s+\d")


def _library(phrase: str, now: datetime, zone: ZoneInfo) -> Parsed | None:
    """dateparser's reading of an English WHEN our rules do not read ("December 24th at 6pm")."""
    if not re.search(r"\d", phrase):  # a phrase without a number is a word of WHAT, not a date
        return None
    import dateparser  # ~0.5 s to import: only when our own rules could not read the phrase

    local_now = now.astimezone(zone).replace(tzinfo=None)
    at = dateparser.parse(phrase, languages=["en"], settings={
        "RELATIVE_BASE": local_now, "PREFER_DATES_FROM": "future", "RETURN_AS_TIMEZONE_AWARE": False,
        "STRICT_PARSING": False})
    if at is None:
        return None
    if not _HAS_TIME.search(normalise(phrase)):
        return Unclear("no_time", when=phrase)
    sched = Schedule(first=at.replace(tzinfo=zone).astimezone(zone), zone=zone.key)
    return Understood(sched, phrase, "") if sched.first > now else Unclear("past", phrase, "", (sched,))


def _library_prefix(text: str, s: str, now: datetime, zone: ZoneInfo) -> Parsed:
    """The longest run of first words (up to six) dateparser reads as WHEN; the rest is WHAT."""
    words = text.split()
    for k in range(min(6, len(words) - 1), 0, -1):
        head = " ".join(words[:k])
        got = _library(head, now, zone)
        if got is not None:
            return _done(got.schedule if isinstance(got, Understood) else Unclear(got.kind, options=got.options),
                         head, clean_what(" ".join(words[k:])))
    return Unclear("unknown", what=text)
