"""The reminders' closing-note scenarios, on the whole bot (build_app) with a recording Telegram
channel and a movable clock: tests assert on them, `bench/reminders_transcript.py` prints them.

Everything is real but the platform: the gateway, inbox, commands, the reminder store and its
delivery through the outbox, DuckDB. The clock is a FakeClock, moved between steps; each step
runs the delivery pass the loop would run at that moment (`run_due`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.app import App, build_app
from bot.config import load_settings
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock

# Wednesday 2026-05-06 10:00 in Shanghai.
START = datetime(2026, 5, 6, 2, 0, tzinfo=UTC)


@asynccontextmanager
async def bot(tmp: Path, clock: FakeClock, embedder, **extra: str) -> AsyncIterator[tuple[App, RecordingChannel]]:
    """The whole bot without an LLM (commands only), on a recording Telegram channel."""
    config = tmp / "memgate.toml"
    tmp.mkdir(parents=True, exist_ok=True)
    config.write_text("")
    env = {"MEMGATE_CONFIG": str(config), "MEMGATE_DATA_DIR": str(tmp / "data"), "MEMGATE_ACCESS_DM_POLICY": "open",
           "MEMGATE_ACCESS_GROUP_POLICY": "open", "MEMGATE_ACCESS_REQUIRE_MENTION": "false",
           "MEMGATE_API_ENABLED": "false", **extra}
    channel = RecordingChannel("telegram")
    app = build_app(load_settings(None, env=env), channels=[channel], clock=clock.now, embedder=embedder)
    async with app:
        yield app, channel
        await app.gateway.idle()


class Talk:
    """Says lines as a person and records the transcript (what they said, what the bot sent)."""

    def __init__(self, app: App, channel: RecordingChannel, clock: FakeClock, lines: list[str]) -> None:
        self.app, self.channel, self.clock, self.lines = app, channel, clock, lines
        self.seen = len(channel.sent)

    async def say(self, user: str, text: str) -> str:
        n = len(self.channel.sent)
        self.lines.append(f"[{self.local()}] {user}: {text}")
        await self.channel.say(user, text)
        await self.channel.wait_for(n + 1, timeout=120)
        return self.heard()[0]

    def local(self) -> str:
        from zoneinfo import ZoneInfo

        return f"{self.clock.now().astimezone(ZoneInfo('Asia/Shanghai')):%a %m-%d %H:%M}"

    def heard(self) -> list[str]:
        new = [r.text for r in self.channel.sent[self.seen:]]
        self.seen = len(self.channel.sent)
        for text in new:
            self.lines.append(f"[{self.local()}] bot: " + text.replace("\n", "\n      "))
        return new

    async def wait(self, *, followups: bool = False, **delta: float) -> list[str]:
        """Move the clock, run the delivery pass (or the follow-up pass), and return what was sent."""
        self.clock.advance(**delta)
        self.lines.append(f"        ... {', '.join(f'{v:g} {k}' for k, v in delta.items())} later"
                          + (" (follow-up pass)" if followups else ""))
        n = len(self.channel.sent)
        if followups:
            await self.app.extras["followups"].run()
        else:
            await self.app.extras["reminder_delivery"].run_due()
        deadline = 200
        while deadline and len(self.channel.sent) == n and await self._pending():
            import asyncio

            await asyncio.sleep(0.05)
            deadline -= 1
        return self.heard()

    async def _pending(self) -> bool:
        return bool(await self.app.store.aread(lambda c: c.execute(
            "SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0]))


async def set_list_cancel_receive(tmp: Path, embedder) -> list[str]:
    """English and Chinese: set, list, cancel, receive (one-off and weekly), and the questions asked."""
    clock = FakeClock(START)
    lines: list[str] = []
    async with bot(tmp, clock, embedder) as (app, channel):
        t = Talk(app, channel, clock, lines)
        await t.say("ann", "/timezone Asia/Shanghai")
        await t.say("ann", "/remind in 10 minutes drink water")
        await t.say("ann", "/remind tomorrow 9:00 call mum")
        await t.say("ann", "/remind every monday 8:00 water the plants")
        await t.say("ann", "/remind tomorrow call the bank")
        await t.say("ann", "/remind at 9 stretch")
        await t.say("ann", "/remind today 9:00 too late")
        await t.say("ann", "/reminders")
        await t.say("ann", "/reminders cancel 2")
        await t.wait(minutes=10)
        await t.say("ann", "/reminders")
        await t.say("li", "/timezone Asia/Shanghai")
        await t.say("li", "/remind 10分钟后 喝水")
        await t.say("li", "/remind 周五下午3点 交报告")
        await t.say("li", "/remind 每周一早上8点 浇花")
        await t.say("li", "/remind 明天9点 起床")
        await t.say("li", "/reminders")
        await t.say("li", "/reminders cancel 6")
        await t.wait(minutes=10)
        await t.wait(days=2, hours=4, minutes=40)    # to Friday 15:00: li's report
        await t.wait(days=2, hours=17)               # to Monday 08:00: ann's weekly one (li cancelled hers)
        await t.say("li", "/reminders")
    return lines


async def restart_late(tmp: Path, embedder, ahead: float = 2, down: float = 3) -> list[str]:
    """Set for `ahead` minutes, stop the gateway, start it `down` minutes later: one late reminder."""
    clock = FakeClock(START)
    lines: list[str] = []
    async with bot(tmp, clock, embedder) as (app, channel):
        t = Talk(app, channel, clock, lines)
        await t.say("ann", "/timezone Asia/Shanghai")
        await t.say("ann", f"/remind in {ahead:g} minutes take the cake out")
    lines.append(f"        ... gateway stopped; {down:g} minutes pass")
    clock.advance(minutes=down)
    async with bot(tmp, clock, embedder) as (app, channel):
        lines.append("        ... gateway started")
        t = Talk(app, channel, clock, lines)
        await channel.wait_for(1, timeout=60)  # sent by the start-up pass, unasked
        t.heard()
        await t.wait(minutes=5)
        lines.append("        ... gateway stopped and started again")
    async with bot(tmp, clock, embedder) as (app, channel):
        t = Talk(app, channel, clock, lines)
        await t.wait(minutes=1)
        lines.append(f"sent in the third run: {len(channel.sent)} (nothing twice)")
    return lines


async def followup_once(tmp: Path, embedder) -> list[str]:
    """Follow-ups: a plan in memory asked about once, the day after, in waking hours, never again
    (not after a restart either), never for a forgotten plan, never in a group."""
    import re

    clock = FakeClock(START)
    lines: list[str] = []
    async with bot(tmp, clock, embedder) as (app, channel):
        t = Talk(app, channel, clock, lines)
        await t.say("ann", "/timezone Asia/Shanghai")
        await t.say("ann", "/followups on")
        await t.say("ann", "/remember my exam is on Friday")
        await t.say("ann", "/remember ok, see you Saturday!")   # a parting, not a plan: never asked about
        said = await t.say("ann", "/remember my dentist appointment is tomorrow")
        dentist = re.search(r"\[(\w+)\]", said).group(1)
        await t.say("ann", f"/forget {dentist}")
        await t.say("li", "/timezone Asia/Shanghai")
        await t.say("li", "/followups on")
        await t.say("li", "/remember 我下周二面试")
        n = len(channel.sent)
        lines.append("[group chat] ann: /followups on")
        await channel.say("ann", "/followups on", chat="-100777", is_group=True)
        await channel.wait_for(n + 1, timeout=60)
        t.heard()
        await t.wait(followups=True, days=2, hours=11)        # Fri 21:00: the exam is today, not yet over
        await t.wait(followups=True, hours=10)                # Sat 07:00: quiet hours
        await t.wait(followups=True, hours=2)                 # Sat 09:00: asked
        await t.wait(followups=True, hours=3)                 # Sat 12:00: one a day, and asked already
        lines.append("        ... gateway stopped and started again")
    async with bot(tmp, clock, embedder) as (app, channel):
        t = Talk(app, channel, clock, lines)
        await t.wait(followups=True, hours=22)                # Sun 10:00: the forgotten dentist is never asked about
        await t.wait(followups=True, days=3)                  # Wed 10:00: li's interview (Tuesday)
        await t.wait(followups=True, days=1)                  # Thu 10:00: nothing left to ask
        asked = app.store.read(lambda c: c.execute("SELECT space_id, event_day FROM followups ORDER BY asked_at").fetchall())
        lines.append(f"follow-ups recorded: {[(s, f'{d}') for s, d in asked]}; LLM calls for finding dates: 0")
    return lines
