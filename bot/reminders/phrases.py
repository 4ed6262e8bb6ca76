"""The pieces of a WHEN phrase, in English and Chinese, read at a position of the text.

Each reader matches one piece ("in 10 minutes", "tomorrow", "周五", "下午", "3点半", "every
monday", "每周一") at a position and returns where it ends and what it says. `bot.reminders.when`
strings them together and turns them into a date and time; nothing here knows the clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

# --- numbers ------------------------------------------------------------------------------
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
ZH_NUM = "[零〇一二两三四五六七八九十百]+"
NUM = rf"(?:\d+|{ZH_NUM})"
EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
              "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40,
              "forty-five": 45, "fifty": 50, "sixty": 60, "ninety": 90}


def zh_int(text: str) -> int | None:
    """A number written in Chinese characters or Arabic digits (0-999), e.g. 二十五 -> 25, 两 -> 2."""
    if text.isdigit():
        return int(text)
    if not text or any(c not in ZH_DIGITS and c not in "十百" for c in text):
        return None
    if all(c in ZH_DIGITS for c in text):  # 二〇二六: digit by digit
        return int("".join(str(ZH_DIGITS[c]) for c in text))
    total, current = 0, 0
    for c in text:
        if c in ZH_DIGITS:
            current = ZH_DIGITS[c]
        elif c == "十":
            total += (current or 1) * 10
            current = 0
        else:  # 百
            total += (current or 1) * 100
            current = 0
    return total + current


def number(text: str) -> float | None:
    """"10", "1.5", "十", "an" -> the number, else None."""
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    if text in EN_NUMBERS:
        return float(EN_NUMBERS[text])
    n = zh_int(text)
    return None if n is None else float(n)


# --- what a phrase says -------------------------------------------------------------------
@dataclass(slots=True)
class Parts:
    """What the pieces read so far say (None: not said)."""

    delta: timedelta | None = None
    every: str | None = None           # "day" | "weekdays" | "week"
    weekday: int | None = None         # 0 = Monday
    week_mode: str = "coming"          # coming | next (English "next friday") | next_week (下周五) | this_week (这周五)
    day_offset: int | None = None      # today = 0, tomorrow = 1
    ymd: tuple[int | None, int, int] | None = None
    day_month_unsure: tuple[int, int] | None = None  # "3/4": March 4 or 3 April
    hour: int | None = None
    minute: int = 0
    clock24: bool = False              # "9:00", "21点": the hour is as written
    ampm: str | None = None            # am | pm
    period: str | None = None          # morning | noon | afternoon | evening | night | early
    seen: set[str] = field(default_factory=set)

    @property
    def has_day(self) -> bool:
        return self.weekday is not None or self.day_offset is not None or self.ymd is not None or \
            self.day_month_unsure is not None


# --- the readers ----------------------------------------------------------------------------
_EN_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
             "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
             "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}
_ZH_UNITS = {"秒": 1, "秒钟": 1, "分": 60, "分钟": 60, "小时": 3600, "钟头": 3600, "天": 86400, "日": 86400,
             "周": 604800, "星期": 604800, "礼拜": 604800}
_EN_AMOUNT = re.compile(
    r"(half an?|\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|"
    r"forty-five|forty|fifty|sixty|ninety)\s*(seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|"
    r"days|day|d|weeks|week|w)\b(?:\s*(?:and|,)\s*)?")
_ZH_AMOUNT = re.compile(rf"(半|{NUM}(?:\.\d+)?)\s*个?\s*(半)?\s*(秒钟|秒|分钟|分|小时|钟头|天|日|周|星期|礼拜)(半)?")
_EN_IN = re.compile(r"in\s+")
_EN_FROM_NOW = re.compile(r"\s*(?:from now|later)\b")
_ZH_AFTER = re.compile(r"\s*(?:以后|之后|后)")
_ZH_GUO = re.compile(r"过\s*")


def _amounts(s: str, pos: int, zh: bool) -> tuple[int, timedelta] | None:
    total, end, pattern = 0.0, pos, _ZH_AMOUNT if zh else _EN_AMOUNT
    while True:
        m = pattern.match(s, end)
        if m is None:
            break
        if zh:
            n = 0.5 if m.group(1) == "半" else number(m.group(1))
            if n is None:
                break
            n += 0.5 if (m.group(2) or m.group(4)) else 0
            total += n * _ZH_UNITS[m.group(3)]
        else:
            n = 0.5 if m.group(1).startswith("half") else number(m.group(1))
            if n is None:
                break
            total += n * _EN_UNITS[m.group(2)]
        end = m.end()
        while end < len(s) and s[end] == " ":
            end += 1
    if end == pos or total <= 0:
        return None
    return end, timedelta(seconds=round(total))


def read_relative(s: str, pos: int, p: Parts) -> int | None:
    """"in 10 minutes", "in 1 hour 30 minutes", "2 hours from now", "10分钟后", "过半小时"."""
    m = _EN_IN.match(s, pos)
    if m:
        got = _amounts(s, m.end(), zh=False)
        if got:
            p.delta = got[1]
            return got[0]
    m = _ZH_GUO.match(s, pos)
    if m:
        got = _amounts(s, m.end(), zh=True)
        if got:
            after = _ZH_AFTER.match(s, got[0])
            p.delta = got[1]
            return after.end() if after else got[0]
    for zh in (False, True):
        got = _amounts(s, pos, zh=zh)
        if got:
            tail = (_ZH_AFTER if zh else _EN_FROM_NOW).match(s, got[0])
            if tail:
                p.delta = got[1]
                return tail.end()
    return None


_EN_WEEKDAYS = {"mon": 0, "monday": 0, "tue": 1, "tues": 1, "tuesday": 1, "wed": 2, "wednesday": 2, "thu": 3,
                "thur": 3, "thurs": 3, "thursday": 3, "fri": 4, "friday": 4, "sat": 5, "saturday": 5, "sun": 6,
                "sunday": 6}
_EN_WEEKDAY = r"(monday|tuesday|tues|tue|wednesday|wed|thursday|thurs|thur|thu|friday|fri|saturday|sat|sunday|sun)"
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "七": 6,
                "1": 0, "2": 1, "3": 2, "4": 3, "5": 4, "6": 5, "7": 6}
_ZH_WEEKDAY = r"(?:周|星期|礼拜)([一二三四五六日天1-7])"
_EVERY_EN = re.compile(rf"(?:every|each)\s+(?:(day|weekday)\b|{_EN_WEEKDAY}\b)|(daily)\b|{_EN_WEEKDAY}s\b")
_EVERY_ZH = re.compile(rf"每\s*(?:(天|日)|个?\s*(工作日)|个?\s*{_ZH_WEEKDAY})|(工作日)")


def read_every(s: str, pos: int, p: Parts) -> int | None:
    """"every monday", "every day", "daily", "every weekday", "mondays", "每周一", "每天", "每个工作日"."""
    m = _EVERY_EN.match(s, pos)
    if m:
        if m.group(1) == "day" or m.group(3):
            p.every = "day"
        elif m.group(1) == "weekday":
            p.every = "weekdays"
        else:
            p.every, p.weekday = "week", _EN_WEEKDAYS[m.group(2) or m.group(4)]
        return m.end()
    m = _EVERY_ZH.match(s, pos)
    if m:
        if m.group(1):
            p.every = "day"
        elif m.group(2) or m.group(4):
            p.every = "weekdays"
        else:
            p.every, p.weekday = "week", _ZH_WEEKDAYS[m.group(3)]
        return m.end()
    return None


_MONTHS = {m: i + 1 for i, names in enumerate((
    ("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
    ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
    ("dec", "december"))) for m in names}
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|" \
         r"jul|aug|sept|sep|oct|nov|dec)\.?"
_DAY_WORDS = re.compile(r"(the day after tomorrow|day after tomorrow|tomorrow|tmrw|tmr|today|tonight)\b|"
                        r"(大后天|后天|明天|明日|今天|今日|今晚|明早|明晚|今早)")
_EN_WEEKDAY_DAY = re.compile(rf"(?:(next|this|coming)\s+)?{_EN_WEEKDAY}\b")
_ZH_WEEKDAY_DAY = re.compile(rf"(下个?|这个?|本)?\s*{_ZH_WEEKDAY}")
_ISO_DATE = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?:t(?=\d))?")
_SLASH_DATE = re.compile(r"(\d{1,2})/(\d{1,2})(?:/(\d{4}|\d{2}))?(?![\d:])")
_MONTH_DAY = re.compile(rf"{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?")
_DAY_MONTH = re.compile(rf"(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:\b|(?<=\.))(?:,?\s+(\d{{4}})\b)?")
_ZH_DATE = re.compile(rf"(?:(\d{{4}}|[零〇一二三四五六七八九]{{4}})\s*年\s*)?({NUM})\s*月\s*({NUM})\s*(?:日|号)")
_DAY_OFFSETS = {"today": 0, "tonight": 0, "tomorrow": 1, "tmr": 1, "tmrw": 1, "day after tomorrow": 2,
                "the day after tomorrow": 2, "今天": 0, "今日": 0, "今晚": 0, "今早": 0, "明天": 1, "明日": 1,
                "明早": 1, "明晚": 1, "后天": 2, "大后天": 3}
_DAY_PERIODS = {"tonight": "evening", "今晚": "evening", "明晚": "evening", "明早": "morning", "今早": "morning"}


def read_day(s: str, pos: int, p: Parts) -> int | None:
    """"today", "tomorrow", "friday", "next friday", "2026-12-24", "dec 24", "12/24", "明天", "下周二", "12月24日"."""
    m = _DAY_WORDS.match(s, pos)
    if m:
        word = m.group(1) or m.group(2)
        p.day_offset = _DAY_OFFSETS[word]
        if word in _DAY_PERIODS and p.period is None:
            p.period = _DAY_PERIODS[word]
        return m.end()
    m = _ISO_DATE.match(s, pos)
    if m:
        p.ymd = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        return m.end()
    m = _ZH_DATE.match(s, pos)
    if m:
        year = zh_int(m.group(1)) if m.group(1) else None
        month, day = zh_int(m.group(2)), zh_int(m.group(3))
        if month is None or day is None:
            return None
        p.ymd = (year, month, day)
        return m.end()
    m = _MONTH_DAY.match(s, pos)
    if m:
        p.ymd = (int(m.group(3)) if m.group(3) else None, _MONTHS[m.group(1)], int(m.group(2)))
        return m.end()
    m = _DAY_MONTH.match(s, pos)
    if m:
        p.ymd = (int(m.group(3)) if m.group(3) else None, _MONTHS[m.group(2)], int(m.group(1)))
        return m.end()
    m = _SLASH_DATE.match(s, pos)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        year = int(m.group(3)) if m.group(3) else None
        if year is not None and year < 100:
            year += 2000
        if a > 12 >= b:
            p.ymd = (year, b, a)
        elif b > 12 >= a or a == b:
            p.ymd = (year, a, b)
        else:
            p.day_month_unsure = (a, b)
            p.ymd = (year, a, b)
        return m.end()
    m = _EN_WEEKDAY_DAY.match(s, pos)
    if m:
        p.weekday = _EN_WEEKDAYS[m.group(2)]
        p.week_mode = "next" if m.group(1) == "next" else "coming"
        return m.end()
    m = _ZH_WEEKDAY_DAY.match(s, pos)
    if m:
        p.weekday = _ZH_WEEKDAYS[m.group(2)]
        prefix = (m.group(1) or "").rstrip("个")
        p.week_mode = {"下": "next_week", "这": "this_week", "本": "this_week"}.get(prefix, "coming")
        return m.end()
    return None


_PERIOD_EN = re.compile(r"(?:in the\s+|this\s+)?(morning|afternoon|evening|night)\b")
_PERIODS_ZH = {"凌晨": "early", "清晨": "morning", "早晨": "morning", "早上": "morning", "上午": "morning", "早": "morning",
               "中午": "noon", "午后": "afternoon", "下午": "afternoon", "傍晚": "evening", "晚上": "evening", "夜里": "night",
               "夜间": "night", "半夜": "night", "晚": "evening"}
_PERIOD_ZH = re.compile("(" + "|".join(sorted(_PERIODS_ZH, key=len, reverse=True)) + ")")


def read_period(s: str, pos: int, p: Parts) -> int | None:
    """"morning", "in the evening", "上午", "下午", "晚上"."""
    m = _PERIOD_EN.match(s, pos)
    if m:
        p.period = m.group(1)
        return m.end()
    m = _PERIOD_ZH.match(s, pos)
    if m:
        p.period = _PERIODS_ZH[m.group(1)]
        return m.end()
    return None


_CLOCK = re.compile(r"(\d{1,2})[:.](\d{2})(?::\d{2})?\s*(a\.?m\.?|p\.?m\.?)?(?![\d])")
_AMPM = re.compile(r"(\d{1,2})\s*(a\.?m\.?|p\.?m\.?)(?![a-z])")
_OCLOCK = re.compile(r"(?:at\s+)(\d{1,2})(?:\s*o'?clock)?(?![\d:./a-z])|(\d{1,2})\s*o'?clock")
_NOON = re.compile(r"(noon|midday|midnight)\b")
_ZH_CLOCK = re.compile(rf"({NUM})\s*(?:点钟|点|时)(?:\s*(半|一刻|三刻|({NUM})\s*分?))?")


def _ampm(text: str | None) -> str | None:
    return None if not text else ("am" if text.startswith("a") else "pm")


def read_time(s: str, pos: int, p: Parts) -> int | None:
    """"9:00", "9pm", "at 9", "noon", "9点", "3点半", "21点15分"."""
    m = _CLOCK.match(s, pos)
    if m:
        p.hour, p.minute, p.ampm = int(m.group(1)), int(m.group(2)), _ampm(m.group(3))
        p.clock24 = p.ampm is None
        return m.end()
    m = _AMPM.match(s, pos)
    if m:
        p.hour, p.minute, p.ampm = int(m.group(1)), 0, _ampm(m.group(2))
        return m.end()
    m = _NOON.match(s, pos)
    if m:
        p.hour, p.minute, p.clock24 = (12 if m.group(1) != "midnight" else 0), 0, True
        if m.group(1) == "midnight":
            p.period = "night"
        return m.end()
    m = _ZH_CLOCK.match(s, pos)
    if m:
        hour = zh_int(m.group(1))
        if hour is None:
            return None
        extra = m.group(2)
        minute = 30 if extra == "半" else 15 if extra == "一刻" else 45 if extra == "三刻" else (
            zh_int(m.group(3)) if m.group(3) else 0)
        if minute is None:
            return None
        p.hour, p.minute = hour, minute
        p.clock24 = hour == 0 or hour > 12
        return m.end()
    m = _OCLOCK.match(s, pos)
    if m:
        p.hour, p.minute = int(m.group(1) or m.group(2)), 0
        p.clock24 = p.hour == 0 or p.hour > 12
        return m.end()
    return None


READERS = (("relative", read_relative), ("every", read_every), ("day", read_day), ("period", read_period),
           ("time", read_time))
# Words between pieces ("tomorrow at 9", "on friday", "明天的"); never the end of a phrase.
FILLER = re.compile(r"(?:(?:at|on|the|by)\b|[,，的在]|\s)+")
SPACE = re.compile(r"[\s,，]*")
