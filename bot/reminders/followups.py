"""Follow-ups from memory: a dated plan or event the person told the bot about ("my exam is on
Friday", "我下周二面试") is asked about once, the day after it ("How did it go?").

Finding the dates is LLM-free (no call, no tokens): the WHEN readers (bot/reminders/phrases.py)
scan the text of the person's own facts and messages in memory for a day ("friday", "next
tuesday", "2026-05-08", "下周二", "5月8日"), read relative to when it was said (the memory's
`created_at`, in the person's zone). Only a day that was still ahead when it was said counts (a
plan, not a remark about today: "today" itself never counts), and only when the rest of the text
names something that happens: a leave-taking or a bare day ("see you friday", "周五见", "talk
tomorrow", "ok, friday then") is no plan of the person's to ask about. Facts extracted by the
memory LLM carry absolute dates already; the person's own messages carry the words they used.

Rules: only for people who said `/followups on` (in their direct chat, where the question goes;
never a group's space); inside waking hours (`[reminders] quiet_hours` is asleep, in their zone);
at most one question a day per person; asked once per event, from the day after it until
`followup_days` after; never about a memory that is gone (checked again in the transaction that
queues the question: a forgotten plan is not asked about). The question and its record
(`followups`) are written in one transaction with the outbox's serial, so a restart, or another
process, never asks again.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bot.delivery.outbox import OUTBOX_WRITES, Outbox
from bot.message import Reply
from bot.reminders.phrases import Parts, read_day
from bot.reminders.schedule import zone_named
from bot.reminders.store import Address
from bot.reminders.views import lang_of
from bot.reminders.when import days_named, normalise
from memory.store.connection import Conn, Store
from memory.store.rows import utc_naive

log = logging.getLogger(__name__)

LOOK_BACK_DAYS = 60       # memories said this recently are scanned for plans
MAX_SCANNED = 2000        # per person and pass
# English day words that count in running text: whole words, full weekday names (not "sat", "sun").
_EN_OK = re.compile(r"^(?:(?:next|this|coming)\s+)?(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
                    r"tomorrow|the day after tomorrow|day after tomorrow)$")


_PAST = re.compile(r"\b(?:went|was|were|did|had|yesterday|last|ago)\b|昨天|前天|上周|上个?星期")


# What a text holds besides its day when it is no plan: leave-takings, greetings and the small
# words around a day. A text whose words are all of these names nothing that happens.
_NOT_AN_EVENT_EN = frozenset("""
    see ya u you talk speak chat catch meet call text ping bye goodbye byebye cya later soon again then until till
    ok okay k sure alright fine yes yeah yep good great nice night morning evening day weekend have a an the
    i i'm i'll me my we we'll we're us our let's it it's that's so and or but to with for of at on in by from
    will be is are am was take care cheers thanks thank hi hello hey user assistant bot here there
    this next coming o'clock am pm
""".split())
# Chinese leave-takings first (as phrases), then the single characters around a day.
_NOT_AN_EVENT_ZH = re.compile(r"(?:上午|下午|早上|晚上|中午|凌晨|傍晚|今晚)?[〇零一二两三四五六七八九十\d]+点(?:半|[〇零一二三四五六七八九十\d]+分?)?|"
                              r"上午|下午|早上|晚上|中午|凌晨|傍晚|再见|拜拜|回头|到时候?|晚安|下次|改天|再聊|见|聊|[我你您他她它们咱的了是在就那这和跟一起好吗嘛吧呢啊呀啦咯喽哦嗯噢哈再又还也]")
_SENTENCE_END = re.compile(r"[.!?;。！？；\n]")
_CLAUSE_END = re.compile(r"[.!?;。！？；\n,、]")   # full-width ， is "," once normalised
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|[\u3400-\u9fff]")


def names_something_that_happens(s: str, start: int, end: int, stops: re.Pattern[str] = _SENTENCE_END) -> bool:
    """Whether the sentence (or with `stops` _CLAUSE_END, the clause) of the normalised text `s`
    holding the day piece s[start:end] holds, besides that day, a word of an event: not only
    leave-takings, greetings, small words and times (see _NOT_AN_EVENT_EN). "see you friday! my
    exam is on monday" has one, on monday."""
    before = [m.end() for m in stops.finditer(s, 0, start)]
    after = stops.search(s, end)
    rest = s[before[-1] if before else 0:start] + " " + s[end:after.start() if after else len(s)]
    rest = _NOT_AN_EVENT_ZH.sub(" ", rest)
    return any(w not in _NOT_AN_EVENT_EN for w in _WORD.findall(rest))


# Where a day piece may start (what bot.reminders.phrases.read_day reads first).
_STARTS = re.compile(r"\d|next|this|coming|the|day|tomorrow|tmr|today|tonight|mon|tue|wed|thu|fri|sat|sun|jan|feb|"
                     r"mar|apr|may|jun|jul|aug|sep|oct|nov|dec|[今明后大下这本周星礼〇零一二三四五六七八九十]")


def quiet_window(spec: str) -> tuple[time, time]:
    """"22:00-08:00" -> (22:00, 08:00)."""
    start, end = spec.split("-")
    return time.fromisoformat(start.zfill(5)), time.fromisoformat(end.zfill(5))


def is_quiet(local: datetime, window: tuple[time, time]) -> bool:
    """Whether the local time is inside the quiet hours (a window may cross midnight)."""
    start, end, t = window[0], window[1], local.time()
    return (start <= t or t < end) if start > end else start <= t < end


def event_day(text: str, said_at: datetime, zone: ZoneInfo) -> date | None:
    """The day of a plan or event in `text`, read relative to when it was said; None when there is none
    (or only a day that was not ahead then). A day whose own clause names the event wins over one
    that only shares its sentence with it: "明天见，我周五考试" (see you tomorrow, I have an exam on
    Friday) is about Friday; "on Friday, I have an exam", with no other day, still Friday."""
    s = normalise(text)
    if _PAST.search(s):
        return None  # "I went there on Monday": told, not planned
    said = said_at.astimezone(zone).date()
    read_to = 0  # the end of the last day piece read: its tail ("周二" of "下周二") is not another day
    shared: tuple[date, int] | None = None  # a day whose sentence names an event, and where that sentence ends
    for m in _STARTS.finditer(s):  # only where a day piece can begin: cheap on text with none
        i = m.start()
        if shared is not None and i >= shared[1]:
            return shared[0]  # no day of its sentence had the event in its own clause
        if i < read_to or (i and s[i - 1].isascii() and s[i - 1].isalnum()):
            continue  # inside an English word
        p = Parts()
        end = read_day(s, i, p)
        if end is None:
            continue
        if end < len(s) and s[end - 1].isascii() and s[end].isascii() and s[end].isalnum():
            continue
        piece = s[i:end].strip()
        if piece.isascii() and re.fullmatch(r"[a-z ]+", piece) and not _EN_OK.match(piece):
            continue
        if p.day_month_unsure is not None or p.day_offset == 0:
            continue
        days = days_named(p, said)
        read_to = end
        # Ahead when said, or the very day when a weekday or a date names it ("my exam is on Friday", on a Friday).
        if not (isinstance(days, list) and days and days[0] >= said):
            continue
        if names_something_that_happens(s, i, end, _CLAUSE_END):
            return days[0]
        if shared is None and names_something_that_happens(s, i, end):
            after = _SENTENCE_END.search(s, end)
            shared = (days[0], after.start() if after else len(s))
    return shared[0] if shared else None


@dataclass(frozen=True, slots=True)
class Question:
    space_id: str
    memory_id: str
    day: date
    text: str


def question_text(memory_text: str, day: date) -> str:
    quoted = memory_text.strip()
    if len(quoted) > 200:
        quoted = quoted[:199] + "…"
    if lang_of(memory_text) == "zh":
        return f"你之前提到：“{quoted}”（{day:%m月%d日}）。进展如何？"
    return f"You mentioned: “{quoted}” ({day:%a %b %d}). How did it go?"


class FollowUps:
    """One pass asks each opted-in person at most one question (run by the scheduler)."""

    def __init__(self, store: Store, outbox: Outbox, *, clock: Callable[[], datetime], default_zone: str,
                 quiet_hours: str, within_days: float) -> None:
        self.store = store
        self.outbox = outbox
        self.clock = clock
        self.default_zone = default_zone
        self.quiet = quiet_window(quiet_hours)
        self.within = timedelta(days=within_days)
        self.asked = 0

    async def run(self) -> int:
        """Ask what is due now; how many questions were queued."""
        people = await self.store.aread(lambda c: c.execute(
            "SELECT space_id, zone, channel, chat_id, recipient_id FROM reminder_prefs "
            "WHERE followups AND channel IS NOT NULL").fetchall())
        asked = 0
        for space, zone_name, channel, chat, recipient in people:
            zone = zone_named(zone_name or self.default_zone) or ZoneInfo("UTC")
            try:
                if await self._one(space, zone, Address(channel, chat, None, recipient)):
                    asked += 1
            except Exception:  # one person's trouble never stops the others'
                log.exception("follow-ups: the pass failed for one person")
        if asked:
            self.asked += asked
            self.outbox.wake()
        return asked

    async def _one(self, space: str, zone: ZoneInfo, dm: Address) -> bool:
        now = self.clock()
        local = now.astimezone(zone)
        if is_quiet(local, self.quiet):
            return False
        day_start = utc_naive(datetime.combine(local.date(), time(0), tzinfo=zone))
        since = utc_naive(now - timedelta(days=LOOK_BACK_DAYS))

        def read(con: Conn):
            if con.execute("SELECT count(*) FROM followups WHERE space_id = ? AND asked_at >= ?",
                           [space, day_start]).fetchone()[0]:
                return None, []
            asked = {r[0] for r in con.execute("SELECT event_day FROM followups WHERE space_id = ?", [space]).fetchall()}
            rows = con.execute(
                "SELECT id, text, created_at FROM memories WHERE space_id = ? AND status = 'active' AND created_at >= ? "
                "AND (kind = 'fact' OR (kind = 'chunk' AND role = 'user')) AND id NOT IN "
                "(SELECT memory_id FROM followups WHERE space_id = ?) ORDER BY created_at DESC LIMIT ?",
                [space, since, space, MAX_SCANNED]).fetchall()
            return asked, rows

        asked_days, rows = await self.store.aread(read)
        if asked_days is None:
            return False  # one a day
        # Scanning up to MAX_SCANNED texts is CPU work: in a thread, off the event loop.
        best = await asyncio.to_thread(self._pick, space, rows, asked_days, zone, local.date())
        if best is None:
            return False
        return await self.store.awrite(lambda c: self._ask(c, best, dm, day_start), serial=OUTBOX_WRITES)

    def _pick(self, space: str, rows: list, asked_days: set, zone: ZoneInfo, today: date) -> Question | None:
        """The plan to ask about: over, within `within`, not asked; the most recent one."""
        best: Question | None = None
        for mid, text, created in rows:
            day = event_day(text, created if created.tzinfo else created.replace(tzinfo=ZoneInfo("UTC")), zone)
            if day is None or day in asked_days or not (today - self.within <= day < today):
                continue
            if best is None or day > best.day:
                best = Question(space, mid, day, question_text(text, day))
        return best

    def _ask(self, con: Conn, q: Question, dm: Address, day_start: datetime) -> bool:
        # Checked again where it is written: still remembered (not forgotten meanwhile), none asked today.
        alive = con.execute("SELECT count(*) FROM memories WHERE id = ? AND space_id = ? AND status = 'active'",
                            [q.memory_id, q.space_id]).fetchone()[0]
        today = con.execute("SELECT count(*) FROM followups WHERE space_id = ? AND asked_at >= ?",
                            [q.space_id, day_start]).fetchone()[0]
        if not alive or today:
            return False
        done = con.execute("INSERT INTO followups (space_id, memory_id, event_day, asked_at) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT DO NOTHING RETURNING memory_id",
                           [q.space_id, q.memory_id, q.day, utc_naive(self.clock())]).fetchall()
        if not done:
            return False
        self.outbox.put_in(con, dm.conversation_key, Reply(channel=dm.channel, chat_id=dm.chat_id, text=q.text,
                                                           recipient_id=dm.recipient_id))
        log.info("follow-up asked in %s about a plan of %s", dm.conversation_key, q.day)
        return True
