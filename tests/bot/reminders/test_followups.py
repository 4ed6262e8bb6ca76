"""Follow-ups from memory: dates found in what the person said (no LLM), asked once the day after,
in waking hours, one a day, never after a restart again, never for a forgotten plan, never in a group."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.reminders.followups import event_day, is_quiet, quiet_window
from tests.bot.reminders.transcript import followup_once

pytestmark = pytest.mark.timeout(600)
SHANGHAI = ZoneInfo("Asia/Shanghai")
SAID = datetime(2026, 5, 6, 2, 0, tzinfo=UTC)   # Wednesday 10:00 in Shanghai


@pytest.mark.parametrize(("text", "day"), [
    ("my exam is on Friday", "2026-05-08"), ("我下周二面试", "2026-05-12"), ("Tomorrow I meet Bob", "2026-05-07"),
    ("User has an exam on 2026-05-08.", "2026-05-08"), ("我5月20日去北京", "2026-05-20"), ("周六去爬山", "2026-05-09"),
    ("I'm tired today", None), ("I sat down and ate", None), ("I went there on Monday", None), ("昨天我去了北京", None),
    ("see you next week", None), ("3/4 is a fraction", None),
    # A leave-taking or a bare day is no plan of the person's (issue 34: "see you friday" was asked about).
    ("see you friday", None), ("OK, see you Friday!", None), ("周五见", None), ("下周二聊", None), ("明天下午三点见", None),
    ("ok, friday then", None), ("good night, talk tomorrow", None), ("那就周五吧", None),
    ("see you friday! my exam is on monday", "2026-05-11"), ("Friday is my sister's wedding", "2026-05-08"),
    ("明天下午三点开会", "2026-05-07"), ("on Friday, I have an exam", "2026-05-08"),
    # A farewell's day gives way to the plan's beside it (not tomorrow: "明天见，我周五考试").
    ("明天见，我周五考试", "2026-05-08"), ("see you tomorrow, my exam is on Friday", "2026-05-08"),
    ("On Friday, I have an exam. Next Tuesday I fly to Lisbon", "2026-05-08"),
])
def test_the_day_of_a_plan_is_read_from_what_was_said(text, day):
    got = event_day(text, SAID, SHANGHAI)
    assert (f"{got}" if got else None) == day


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1)).map(lambda d: d.replace(tzinfo=UTC)),
       st.integers(0, 6), st.booleans())
def test_a_weekday_plan_is_that_day_of_the_week_it_was_said_in_or_the_next(said, weekday, chinese):
    text = f"我周{'一二三四五六日'[weekday]}有个面试" if chinese else \
        f"my interview is on {('monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday')[weekday]}"
    day = event_day(text, said, SHANGHAI)
    said_day = said.astimezone(SHANGHAI).date()
    assert day is not None and day.weekday() == weekday and timedelta(0) <= day - said_day <= timedelta(days=6)


EN_DAYS = ["friday", "on friday", "tomorrow", "next tuesday", "monday", "the day after tomorrow"]
ZH_DAYS = ["周五", "明天", "下周二", "后天", "周一", "5月20日"]
EN_PARTINGS = ["see you {d}", "see ya {d}!", "talk to you {d}", "ok, {d} then", "bye, until {d}", "catch you {d} :)",
               "good night, see you {d}", "{d} then", "speak soon, {d}", "thanks! see you {d} at 3pm"]
ZH_PARTINGS = ["{d}见", "{d}见！", "{d}再聊吧", "那就{d}吧", "好的，{d}见", "回头{d}聊", "{d}下午三点见", "咱们{d}见"]
EN_PLANS = ["my exam is on {d}", "{d} I fly to Lisbon", "the dentist appointment is {d}", "{d} is my sister's wedding",
            "see you {d}, I have an interview then"]
ZH_PLANS = ["我{d}面试", "{d}我要交报告", "{d}去爬山", "{d}和朋友见面", "我们{d}开会"]


@given(st.booleans(), st.integers(0, 100), st.integers(0, 100), st.booleans())
def test_a_parting_with_a_day_is_no_plan_and_a_plan_with_a_day_is(chinese, which, day, plan):
    """Whatever the day and however the person says goodbye, a parting is never a follow-up; the same
    day with something that happens is (issue 34: "see you friday")."""
    days, texts = (ZH_DAYS, ZH_PLANS if plan else ZH_PARTINGS) if chinese else (EN_DAYS, EN_PLANS if plan else EN_PARTINGS)
    text = texts[which % len(texts)].format(d=days[day % len(days)])
    got = event_day(text, SAID, SHANGHAI)
    assert (got is not None) == plan, text


@given(st.booleans(), st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.booleans())
def test_a_partings_day_gives_way_to_the_plans_day_beside_it(chinese, parting, parting_day, plan, plan_day, parting_first):
    """A leave-taking and a plan in one sentence, each with its day, in either order: the follow-up
    is about the plan's day ("明天见，我周五考试" was read as tomorrow's)."""
    days = ZH_DAYS if chinese else EN_DAYS
    partings = ZH_PARTINGS if chinese else EN_PARTINGS
    plans = ZH_PLANS if chinese else [p for p in EN_PLANS if "," not in p]   # the plan's day in its own clause
    said_plan = plans[plan % len(plans)].format(d=days[plan_day % len(days)])
    said_parting = partings[parting % len(partings)].format(d=days[parting_day % len(days)])
    text = (said_parting, said_plan) if parting_first else (said_plan, said_parting)
    text = ("，" if chinese else ", ").join(text)
    expected = event_day(said_plan, SAID, SHANGHAI)
    assert expected is not None and event_day(text, SAID, SHANGHAI) == expected, text


@given(st.times(), st.times(), st.times())
def test_quiet_hours_hold_on_either_side_of_midnight(start, end, t):
    window = (start.replace(second=0, microsecond=0), end.replace(second=0, microsecond=0))
    quiet = is_quiet(datetime.combine(datetime(2026, 1, 1).date(), t), window)
    s, e = window
    assert quiet == ((s <= t < e) if s <= e else (t >= s or t < e))
    assert quiet_window("22:00-08:00") == (time(22, 0), time(8, 0))


async def test_a_plan_is_asked_about_once_and_not_again_after_a_restart(tmp_path, embedder):
    lines = await followup_once(tmp_path, embedder)
    asked = [ln for ln in lines if "How did it go?" in ln or "进展如何" in ln]
    assert asked == ["[Sat 05-09 09:00] bot: You mentioned: “my exam is on Friday” (Fri May 08). How did it go?",
                     "[Wed 05-13 10:00] bot: 你之前提到：“我下周二面试”（05月12日）。进展如何？"]
    assert not any("dentist" in ln for ln in lines if "] bot: You mentioned" in ln)   # forgotten
    assert "Follow-ups are for our direct chat only" in "\n".join(lines)               # never in a group
    assert "LLM calls for finding dates: 0" in lines[-1] and lines[-1].count("', '") == 2
