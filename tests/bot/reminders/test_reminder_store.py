"""The reminder store and its delivery pass on both backends: per-space listing and cancelling,
the person's zone, and a due reminder claimed once however many processes look at once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from bot.delivery.inbox import INBOX_MIGRATIONS
from bot.delivery.outbox import OUTBOX_MIGRATIONS, Outbox
from bot.reminders.delivery import ReminderDelivery
from bot.reminders.schedule import Schedule
from bot.reminders.store import REMINDER_MIGRATIONS, Address, ReminderStore, count_active
from bot.scheduler import SCHEDULER_MIGRATIONS
from bot.turn.sessions import SESSION_MIGRATIONS
from memory.store.backend import open_store
from memory.store.url import duckdb_url
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock

MIGRATIONS = (*SESSION_MIGRATIONS, *INBOX_MIGRATIONS, *OUTBOX_MIGRATIONS, *SCHEDULER_MIGRATIONS, *REMINDER_MIGRATIONS)
START = datetime(2026, 5, 6, 2, 0, tzinfo=UTC)
ANN = Address("telegram", "100", None, "100")


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "duckdb":
        return duckdb_url(tmp_path / "m.duckdb")
    return request.getfixturevalue("pg_url")


def _once(at: datetime) -> Schedule:
    return Schedule(first=at, zone="Asia/Shanghai")


async def test_reminders_are_listed_and_cancelled_in_their_own_space_only(url):
    clock = FakeClock(START)
    with open_store(url, 384, extra_migrations=MIGRATIONS) as store:
        r = ReminderStore(store, clock=clock.now, default_zone="Europe/Berlin")
        a = await r.acreate("u_ann", ANN, "telegram:100", "call mum", _once(START + timedelta(hours=1)))
        b = await r.acreate("u_bob", Address("telegram", "200", None, "200"), "telegram:200", "pay rent",
                            _once(START + timedelta(hours=2)))
        assert [x.text for x in await r.active(["u_ann"])] == ["call mum"]
        assert await r.cancel(b.id, ["u_ann"]) is None            # not ann's
        assert await r.get(b.id, ["u_ann"]) is None
        assert (await r.cancel(a.id, ["u_ann"])).status == "cancelled"
        assert await r.cancel(a.id, ["u_ann"]) is None            # once
        assert await r.active(["u_ann"]) == []
        assert store.read(lambda c: count_active(c, ["u_bob"])) == 1
        assert await r.zone("u_ann") == "Europe/Berlin"           # the configured default ...
        await r.set_zone("u_ann", "Asia/Shanghai")
        assert await r.zone("u_ann") == "Asia/Shanghai"           # ... until /timezone
        assert await r.zone("u_bob") == "Europe/Berlin"


async def test_a_due_reminder_is_queued_once_when_several_processes_look_at_once(url):
    """Four stores (four processes' connections) run the delivery pass at the same moment: one outbox row."""
    clock = FakeClock(START)
    stores = [open_store(url, 384, extra_migrations=MIGRATIONS) for _ in range(4 if "postgresql" in url else 1)]
    try:
        r = ReminderStore(stores[0], clock=clock.now)
        rec = await r.acreate("u_ann", ANN, "telegram:100", "call mum", _once(START + timedelta(minutes=5)))
        weekly = await r.acreate("u_ann", ANN, "telegram:100", "water the plants",
                                 Schedule(START + timedelta(minutes=5), "Asia/Shanghai", "week", 10, 5))
        clock.advance(minutes=5)
        deliveries = []
        for s in stores:
            channels = {"telegram": RecordingChannel("telegram")}
            deliveries.append(ReminderDelivery(s, Outbox(s, channels, clock=clock.now), channels, clock=clock.now))
        await asyncio.gather(*(d.run_due() for d in deliveries))
        assert sum(d.sent for d in deliveries) == 2
        rows = stores[0].read(lambda c: c.execute("SELECT count(*) FROM outbox").fetchone()[0])
        assert rows == 2
        assert (await r.get(rec.id, ["u_ann"])) is None or (await r.get(rec.id, ["u_ann"])).status == "done"
        nxt = await r.get(weekly.id, ["u_ann"])
        assert nxt.status == "active" and nxt.due_at == START + timedelta(days=7, minutes=5)
        await asyncio.gather(*(d.run_due() for d in deliveries))   # nothing is due any more
        assert stores[0].read(lambda c: c.execute("SELECT count(*) FROM outbox").fetchone()[0]) == 2
    finally:
        for s in stores:
            s.close()


class _OfficialAccount:
    """A channel that may write only within 48 hours of the person's last message (bot.channel.LimitsReplies)."""

    name = "wechat_mp"
    reply_window_hours = 48.0


async def test_a_reminder_beyond_the_official_accounts_window_is_told_it_may_not_arrive(tmp_path):
    from bot.reminders.desk import ReminderDesk

    clock = FakeClock(START)
    with open_store(duckdb_url(tmp_path / "m.duckdb"), 384, extra_migrations=MIGRATIONS) as store:
        desk = ReminderDesk(ReminderStore(store, clock=clock.now), clock=clock.now,
                            channels={"wechat_mp": _OfficialAccount(), "telegram": RecordingChannel("telegram")})
        mp = Address("wechat_mp", "oABC", None, "oABC")
        soon = await desk.set("u_ann", mp, "wechat_mp:oABC", text="tomorrow 9:00 call mum")
        assert soon.reminder is not None and "may not arrive" not in soon.answer        # within 48 hours
        later = await desk.set("u_ann", mp, "wechat_mp:oABC", text="2026-05-20 9:00 pay the rent")
        assert later.reminder is not None and "within 48 hours of your last message" in later.answer
        weekly = await desk.set("u_ann", mp, "wechat_mp:oABC", text="每周一早上8点 浇花")
        assert "公众号只能在你最后一次发消息后的 48 小时内" in weekly.answer
        elsewhere = await desk.set("u_ann", ANN, "telegram:100", text="2026-05-20 9:00 pay the rent")
        assert "may not arrive" not in elsewhere.answer
        secret = await desk.set("u_ann", ANN, "telegram:100", text="in 1 hour log in, my password is hunter2hunter2")
        assert "hunter2hunter2" not in secret.reminder.text and "hunter2hunter2" not in secret.answer


class _Terminal(RecordingChannel):
    """A terminal: read only while open (bot.channel.KnowsReaders)."""

    def __init__(self) -> None:
        super().__init__("console")
        self.open = False

    def reader_chat(self, recipient_id: str, chat_id: str) -> str | None:
        return "alice" if self.open and recipient_id == "alice" else None


async def test_a_terminal_reminder_waits_while_no_terminal_is_open_then_goes_out_once(tmp_path):
    clock = FakeClock(START)
    with open_store(duckdb_url(tmp_path / "m.duckdb"), 384, extra_migrations=MIGRATIONS) as store:
        terminal = _Terminal()
        channels = {"console": terminal}
        outbox = Outbox(store, channels, clock=clock.now)
        delivery = ReminderDelivery(store, outbox, channels, clock=clock.now)
        r = ReminderStore(store, clock=clock.now)
        rec = await r.acreate("u_alice", Address("console", "alice@attached", None, "alice"), "console:alice", "tea",
                              _once(START + timedelta(minutes=1)))
        clock.advance(minutes=2)
        wait = await delivery.run_due()
        assert wait == delivery.settings.poll_seconds and delivery.sent == 0     # nobody reads: it waits, no spinning
        assert (await r.get(rec.id, ["u_alice"])).status == "active"
        terminal.open = True
        clock.advance(minutes=5)
        await delivery.run_due()
        await delivery.run_due()
        assert delivery.sent == 1
        row = store.read(lambda c: c.execute("SELECT conversation_key, reply FROM outbox").fetchall())
        assert len(row) == 1 and row[0][0] == "console:alice" and "Late by 6 minutes" in row[0][1]
