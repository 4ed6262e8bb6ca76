"""The WHEN parser (bot/reminders/when.py): the table of accepted phrases, and hypothesis properties
over random moments, zones (with and without daylight saving), times and texts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bot.reminders.phrases import zh_int
from bot.reminders.schedule import Schedule, next_occurrence
from bot.reminders.when import Understood, Unclear, parse_reminder, parse_when

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 5, 6, 2, 0, tzinfo=UTC)   # Wednesday 2026-05-06 10:00 in Shanghai

# (phrase, what the bot understood: local "Ddd YYYY-MM-DD HH:MM", the rule, or the question kind)
PHRASES: tuple[tuple[str, str], ...] = (
    ("in 10 minutes", "Wed 2026-05-06 10:10"),
    ("in 2 hours", "Wed 2026-05-06 12:00"),
    ("in 1 hour 30 minutes", "Wed 2026-05-06 11:30"),
    ("in half an hour", "Wed 2026-05-06 10:30"),
    ("in 3 days", "Sat 2026-05-09 10:00"),
    ("20 minutes from now", "Wed 2026-05-06 10:20"),
    ("tomorrow 9:00", "Thu 2026-05-07 09:00"),
    ("tomorrow at 9am", "Thu 2026-05-07 09:00"),
    ("tomorrow morning at 8", "Thu 2026-05-07 08:00"),
    ("tonight at 8", "Wed 2026-05-06 20:00"),
    ("today 18:30", "Wed 2026-05-06 18:30"),
    ("15:00", "Wed 2026-05-06 15:00"),
    ("9:00", "Thu 2026-05-07 09:00"),
    ("noon", "Wed 2026-05-06 12:00"),
    ("2026-12-24 18:00", "Thu 2026-12-24 18:00"),
    ("2026-12-24T18:00", "Thu 2026-12-24 18:00"),
    ("dec 24 6pm", "Thu 2026-12-24 18:00"),
    ("24 december 18:00", "Thu 2026-12-24 18:00"),
    ("December 24th at 6pm", "Thu 2026-12-24 18:00"),
    ("12/24 18:00", "Thu 2026-12-24 18:00"),
    ("24.12.2026 18:00", "Thu 2026-12-24 18:00"),           # dateparser's
    ("Dec 24, 2026 at 6:30 PM", "Thu 2026-12-24 18:30"),
    ("friday 15:00", "Fri 2026-05-08 15:00"),
    ("on friday at 3pm", "Fri 2026-05-08 15:00"),
    ("next wednesday 9:00", "Wed 2026-05-13 09:00"),
    ("every monday 8:00", "every week Mon 2026-05-11 08:00"),
    ("every day at 7am", "every day Thu 2026-05-07 07:00"),
    ("every weekday 8:30", "every weekdays Thu 2026-05-07 08:30"),
    ("mondays 8:00", "every week Mon 2026-05-11 08:00"),
    ("10分钟后", "Wed 2026-05-06 10:10"),
    ("半小时后", "Wed 2026-05-06 10:30"),
    ("两个小时后", "Wed 2026-05-06 12:00"),
    ("一个半小时后", "Wed 2026-05-06 11:30"),
    ("过20分钟", "Wed 2026-05-06 10:20"),
    ("明天上午9点", "Thu 2026-05-07 09:00"),
    ("明天早上九点半", "Thu 2026-05-07 09:30"),
    ("明晚8点", "Thu 2026-05-07 20:00"),
    ("今天下午三点一刻", "Wed 2026-05-06 15:15"),
    ("后天中午12点", "Fri 2026-05-08 12:00"),
    ("周五下午3点", "Fri 2026-05-08 15:00"),
    ("星期五下午3点", "Fri 2026-05-08 15:00"),
    ("下周二上午10点", "Tue 2026-05-12 10:00"),
    ("12月24日晚上7点", "Thu 2026-12-24 19:00"),
    ("2026年12月24日18:00", "Thu 2026-12-24 18:00"),
    ("每周一早上8点", "every week Mon 2026-05-11 08:00"),
    ("每天晚上10点", "every day Wed 2026-05-06 22:00"),
    ("每个工作日上午9点", "every weekdays Thu 2026-05-07 09:00"),
    ("tomorrow", "ask: no_time"),
    ("friday", "ask: no_time"),
    ("下周二", "ask: no_time"),
    ("at 9", "ask: am_pm"),
    ("明天3点", "ask: am_pm"),
    ("3/4 10:00", "ask: day_month"),
    ("today 9:00", "ask: past"),
    ("2025-01-01 10:00", "ask: past"),
    ("2026-02-30 10:00", "ask: bad_date"),
    ("someday", "ask: unknown"),
)
LIBRARY = {"24.12.2026 18:00"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def understood(got) -> str:
    """A parse result as the PHRASES table writes it."""
    if isinstance(got, Unclear):
        return f"ask: {got.kind}"
    s = got.schedule
    t = s.local_first
    rule = f"every {s.every} " if s.every else ""
    return f"{rule}{_DAYS[t.weekday()]} {t:%Y-%m-%d %H:%M}"


@pytest.mark.parametrize(("phrase", "expected"), PHRASES)
def test_the_table_of_accepted_phrases(phrase, expected):
    assert understood(parse_when(phrase, NOW, SHANGHAI)) == expected
    # The same phrase before and after WHAT in a /remind text reads the same, and WHAT stays whole.
    if not expected.startswith("ask: unknown"):
        # WHAT first works for the phrases our own rules read (dateparser reads a WHEN at the start).
        for text in (f"{phrase} call the dentist", *([f"call the dentist {phrase}"] if phrase not in LIBRARY else [])):
            got = parse_reminder(text, NOW, SHANGHAI)
            assert understood(got) == expected, text
            assert got.what == "call the dentist", text


ZONES = ("UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata",
         "America/Sao_Paulo", "Pacific/Auckland")
moments = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31)).map(lambda d: d.replace(tzinfo=UTC))
zones = st.sampled_from(ZONES).map(ZoneInfo)
EN_UNITS = {"minutes": 60, "min": 60, "hours": 3600, "h": 3600, "days": 86400, "seconds": 1}
ZH_UNITS = {"分钟": 60, "小时": 3600, "个小时": 3600, "天": 86400, "秒": 1}
ZH_NUMERALS = {1: "一", 2: "两", 3: "三", 10: "十", 12: "十二", 20: "二十", 25: "二十五", 45: "四十五", 99: "九十九"}
PERIODS = ((range(0, 6), "凌晨"), (range(6, 12), "上午"), (range(12, 18), "下午"), (range(18, 24), "晚上"))
WHAT_WORDS = ("call", "mum", "water", "plants", "buy", "milk", "dentist", "喝水", "交报告", "浇花", "给妈妈打电话")
EN_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
ZH_DAYS = ("一", "二", "三", "四", "五", "六", "日")
HYPO = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _local_is(at: datetime, zone: ZoneInfo, hour: int, minute: int) -> bool:
    """The local wall time is hour:minute, or the first time after a DST gap that skipped it."""
    t = at.astimezone(zone)
    if (t.hour, t.minute) == (hour, minute):
        return True
    naive = t.replace(tzinfo=None, hour=hour, minute=minute)
    back = naive.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    return back != naive and t.replace(tzinfo=None) == back  # skipped by the gap: moved past it


@HYPO
@given(moments, zones, st.integers(1, 999), st.sampled_from(sorted(EN_UNITS)), st.booleans())
def test_in_n_units_is_exactly_that_much_later(now, zone, n, unit, chinese):
    if chinese:
        zh_unit = {"minutes": "分钟", "min": "分钟", "hours": "小时", "h": "个小时", "days": "天", "seconds": "秒"}[unit]
        got = parse_when(f"{ZH_NUMERALS.get(n, n)}{zh_unit}后", now, zone)
    else:
        got = parse_when(f"in {n} {unit}", now, zone)
    assert isinstance(got, Understood)
    assert got.schedule.first - now == timedelta(seconds=n * EN_UNITS[unit])


@HYPO
@given(moments, zones, st.integers(0, 23), st.integers(0, 59), st.booleans())
def test_tomorrow_at_a_time_is_that_local_time_on_the_next_local_day(now, zone, hour, minute, chinese):
    if chinese:
        period = next(name for hours, name in PERIODS if hour in hours)
        h12 = hour if hour < 13 else hour - 12
        phrase = f"明天{period}{ZH_NUMERALS.get(h12, h12)}点{minute}分" if minute else f"明天{period}{h12}点"
    else:
        phrase = f"tomorrow {hour}:{minute:02d}"
    got = parse_when(phrase, now, zone)
    assert isinstance(got, Understood), phrase
    local = got.schedule.first.astimezone(zone)
    assert local.date() - now.astimezone(zone).date() in (timedelta(days=1), timedelta(days=2)), phrase
    assert _local_is(got.schedule.first, zone, hour, minute), phrase


@HYPO
@given(moments, zones, st.integers(0, 6), st.integers(0, 23), st.integers(0, 59), st.booleans(), st.booleans())
def test_a_weekday_or_every_weekday_is_the_next_one_at_that_time(now, zone, weekday, hour, minute, chinese, every):
    if chinese:
        period = next(name for hours, name in PERIODS if hour in hours)
        h12 = hour if hour < 13 else hour - 12
        phrase = f"{'每' if every else ''}周{ZH_DAYS[weekday]}{period}{h12}点{minute}分"
    else:
        phrase = f"{'every ' if every else ''}{EN_DAYS[weekday]} {hour}:{minute:02d}"
    got = parse_when(phrase, now, zone)
    assert isinstance(got, Understood), phrase
    s = got.schedule
    assert now < s.first <= now + timedelta(days=7, hours=2), phrase
    assert s.first.astimezone(zone).weekday() == weekday, phrase
    assert _local_is(s.first, zone, hour, minute), phrase
    assert (s.every == "week") is every


@HYPO
@given(moments, zones, st.sampled_from(("in 10 minutes", "tomorrow 9:00", "friday 15:00", "every monday 8:00",
                                        "2036-12-24 18:00", "10分钟后", "明天上午9点", "周五下午3点", "每周一早上8点")),
       st.lists(st.sampled_from(WHAT_WORDS), min_size=1, max_size=5), st.booleans())
def test_when_and_what_are_split_apart_whichever_comes_first(now, zone, when, words, when_first):
    what = " ".join(words)
    text = f"{when} {what}" if when_first else f"{what} {when}"
    alone, got = parse_when(when, now, zone), parse_reminder(text, now, zone)
    assert isinstance(alone, Understood) and isinstance(got, Understood), text
    assert got.schedule == alone.schedule and got.what == what, text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moments, zones, st.text(max_size=40))
@example(NOW, SHANGHAI, "0点")
@example(NOW, SHANGHAI, "99:99")
@example(NOW, SHANGHAI, "2026-13-45 10:00")
@example(NOW, SHANGHAI, "十百百点")
def test_any_text_is_read_or_asked_about_and_never_in_the_past(now, zone, text):
    for got in (parse_reminder(text, now, zone), parse_when(text, now, zone)):
        assert isinstance(got, Understood | Unclear)
        if isinstance(got, Understood):
            assert got.schedule.first > now


@HYPO
@given(moments, st.sampled_from(("America/New_York", "Europe/Berlin", "Australia/Sydney", "America/Sao_Paulo")).map(ZoneInfo),
       st.integers(0, 23), st.integers(0, 59), st.sampled_from(("day", "weekdays", "week")), st.integers(0, 6))
def test_a_repeating_reminder_keeps_its_local_time_across_daylight_saving(start, zone, hour, minute, every, weekday):
    at, seen = start, []
    for _ in range(60):
        nxt = next_occurrence(every, hour, minute, weekday, zone, at)
        assert nxt > at
        assert _local_is(nxt, zone, hour, minute)
        if every == "week":
            assert nxt.astimezone(zone).weekday() == weekday
        if every == "weekdays":
            assert nxt.astimezone(zone).weekday() < 5
        seen.append(nxt.astimezone(zone).date())
        at = nxt
    step = {"day": {1}, "weekdays": {1, 3}, "week": {7}}[every]
    assert {(b - a).days for a, b in zip(seen, seen[1:])} <= step


def test_daily_8_stays_8_local_over_the_new_york_spring_and_fall_changes():
    ny = ZoneInfo("America/New_York")
    s = Schedule(first=datetime(2026, 3, 7, 13, 0, tzinfo=UTC), zone="America/New_York", every="day", hour=8, minute=0)
    got, at = [], s.first
    for _ in range(3):
        got.append(at)
        at = s.next_after(at)
    assert [t.astimezone(ny).strftime("%m-%d %H:%M") for t in got] == ["03-07 08:00", "03-08 08:00", "03-09 08:00"]
    assert [t.strftime("%H:%M") for t in got] == ["13:00", "12:00", "12:00"]   # UTC moves, the local time does not
    gap = next_occurrence("day", 2, 30, 0, ny, datetime(2026, 3, 8, 5, 0, tzinfo=UTC))
    assert gap.astimezone(ny).strftime("%m-%d %H:%M") == "03-08 03:30"        # 02:30 does not exist that night
    fall = next_occurrence("day", 1, 30, 0, ny, datetime(2026, 11, 1, 4, 0, tzinfo=UTC))
    assert fall == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)                     # the first of the two 01:30s


@given(st.integers(0, 99))
def test_chinese_numerals(n):
    ones = "零一二三四五六七八九"
    text = ones[n] if n < 10 else f"{ones[n // 10] if n >= 20 else ''}十{ones[n % 10] if n % 10 else ''}"
    assert zh_int(text) == n
    assert zh_int(str(n)) == n
