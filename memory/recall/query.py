"""What a recall query asks for, read from its words alone (no LLM): whether it wants many
items (a count or a list), and the time span its relative time words point at, with the
question's own date as "now"; and the query itself, built from the recent exchange when recall
runs inside a conversation. Pure functions."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# A count or a list: the evidence is spread over several memories, so recall widens its
# candidates and diversifies by what the memories are about.
_MANY_EN = re.compile(
    r"\b(?:how many|how often|how much (?:time|times)|which|list|all|every|each|what (?:are|were) (?:the|some|all)"
    r"|what (?:kinds?|types?|sorts?) of|name (?:all|some|the)|in total|altogether)\b", re.IGNORECASE)
_MANY_ZH = re.compile(r"几个|几家|几次|几种|几位|几本|几样|哪些|哪几|多少个|多少次|多少种|多少家|一共|总共|共有|所有|都有哪|分别|列出|哪\S?些")


def wants_many(query: str) -> bool:
    """True when the query asks for a count or a list ("how many", "which", 几个, 哪些, 一共)."""
    return bool(_MANY_EN.search(query) or _MANY_ZH.search(query))


@dataclass(frozen=True, slots=True)
class TimeSpan:
    """A half-open span [start, end) the query's time words point at."""

    start: datetime
    end: datetime

    def __contains__(self, when: datetime) -> bool:
        return self.start <= when < self.end


_EN_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_ZH_NUM = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10, "半": 0.5}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365, "天": 1, "日": 1, "周": 7, "星期": 7, "个星期": 7,
              "个礼拜": 7, "礼拜": 7, "个月": 30, "月": 30, "年": 365}
_AGO_EN = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)\s+(day|week|month|year)s?\s+ago\b", re.I)
_AGO_ZH = re.compile(r"(\d+|[一两二三四五六七八九十半])\s*(天|个星期|星期|个礼拜|礼拜|周|个月|年)(?:之前|以前|前)")


def _day(d: datetime) -> datetime:
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def _week(d: datetime) -> datetime:
    return _day(d) - timedelta(days=d.weekday())


def _month(d: datetime, back: int = 0) -> datetime:
    # `back` may be negative (the month after, for "this month"'s end): December + 1 is next January.
    y, m0 = divmod(d.year * 12 + d.month - 1 - back, 12)
    return datetime(y, m0 + 1, 1)


# 最近 is "recently" (我最近买了, 最近的一次) unless it is "nearest": after 离/距 in the same clause
# (离酒店最近的超市) or before 的 and a place (最近的地铁站, 那边最近的出口). Those are removed
# before the time words are read.
_NEAREST = (re.compile(r"([离距](?!开)[^，。？！,.?!]*?)最近"),
            re.compile(r"最近(?=的[^，。？！,.?!\s]{0,6}?(?:站|店|馆|超市|医院|公园|口|场|院|铺|楼|路|街|地方|酒店|餐厅|景点))"))


def _without_nearest(query: str) -> str:
    return _NEAREST[1].sub("", _NEAREST[0].sub(r"\1", query))


def time_span(query: str, now: datetime) -> TimeSpan | None:
    """The span of "yesterday", "last week", "3 days ago", "去年", "上周", "两个月前"... (None
    when the query has none). Calendar words take calendar spans (上周 = Monday to Monday of
    the week before `now`'s); "N units ago" takes a span of one unit around that point."""
    q = _without_nearest(query.lower())
    day, week, month = _day(now), _week(now), _month(now)
    fixed: list[tuple[str, TimeSpan]] = [
        (r"\bday before yesterday\b|前天", TimeSpan(day - timedelta(days=2), day - timedelta(days=1))),
        (r"\byesterday\b|昨天|昨日|昨晚", TimeSpan(day - timedelta(days=1), day)),
        (r"\btoday\b|\btonight\b|今天|今日|今晚", TimeSpan(day, day + timedelta(days=1))),
        (r"\blast weekend\b|上个?周末", TimeSpan(week - timedelta(days=2), week)),
        (r"\blast week\b|上周|上个?星期|上个?礼拜", TimeSpan(week - timedelta(days=7), week)),
        (r"\bthis week\b|这周|本周|这个?星期|这个?礼拜", TimeSpan(week, week + timedelta(days=7))),
        (r"\blast month\b|上个月|上月", TimeSpan(_month(now, 1), month)),
        (r"\bthis month\b|这个月|本月", TimeSpan(month, _month(now, -1))),
        (r"\blast year\b|去年", TimeSpan(datetime(now.year - 1, 1, 1), datetime(now.year, 1, 1))),
        (r"\bthis year\b|今年", TimeSpan(datetime(now.year, 1, 1), datetime(now.year + 1, 1, 1))),
        (r"\brecently\b|\blately\b|最近|近来", TimeSpan(day - timedelta(days=14), day + timedelta(days=1))),
    ]
    for pattern, span in fixed:
        if re.search(pattern, q):
            return span
    m = _AGO_EN.search(q)
    if m:
        n, unit = _EN_NUM.get(m.group(1), None) or int(m.group(1)), _UNIT_DAYS[m.group(2)]
    else:
        m = _AGO_ZH.search(q)
        if not m:
            return None
        n, unit = (int(m.group(1)) if m.group(1).isdigit() else _ZH_NUM[m.group(1)]), _UNIT_DAYS[m.group(2)]
    centre = now - timedelta(days=n * unit)
    half = timedelta(days=max(1.0, unit / 2))
    return TimeSpan(centre - half, centre + half)


# The person's messages a query inside a conversation is built from (the current one included).
QUERY_MESSAGES = 6
QUERY_CHARS = 1000


def recall_query(history: Sequence[tuple[str, str]], text: str, *, messages: int = QUERY_MESSAGES,
                 max_chars: int = QUERY_CHARS) -> str:
    """The recall query for `text` said after `history` ((role, text), oldest first): the
    person's newest message whole, then the content words of their earlier messages of the
    recent exchange, newest first (`messages` in all, `max_chars` characters at most).

    A message alone often does not say what it is about ("I'm really looking forward to that
    evening"): the exchange does. The person's own words count because they say what they mean;
    the assistant's replies are left out (what the bot said is not what the person said, and its
    long replies outweigh a short question; adding the names of its last reply cost MADial-zh 1.4
    R@10). Newest first: the embedder reads the start of a text best, and the keyword side takes
    every word once. MADial's running dialogues, R@10 / R@block (bench/RESULTS-recall.md): the
    last message alone (with the one before when short, the rule before) en 63.5 / 53.6, zh 62.7
    / 54.6; built so, en 75.3 / 64.3, zh 70.9 / 63.6."""
    from memory.text import STOPWORDS, tokenize

    text = text[:max_chars]
    said = [t for role, t in reversed(history) if role == "user" and t.strip()][: max(0, messages - 1)]
    parts, used = [text], len(text)
    for t in said:
        words = " ".join(dict.fromkeys(w for w in tokenize(t) if w not in STOPWORDS and not (len(w) == 1 and w.isascii())))
        if not words:
            continue
        if used + len(words) + 1 > max_chars:
            break
        parts.append(words)
        used += len(words) + 1
    return "\n".join(parts)[:max_chars]
