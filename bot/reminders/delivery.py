"""Due reminders -> the outbox, each occurrence exactly once.

A pass reads the active reminders that are due, and for each one this process can deliver now
claims it and queues its text in one transaction (the outbox's serial, `Outbox.put_in`): the
claim is a conditional update (still active, still due at the time read), so of two processes
on one PostgreSQL only the first claims it, and a process killed at any point either queued it
(the outbox then delivers it, adopted by another process if need be) or left it due. A repeating
reminder moves to its next local occurrence in the same update; occurrences missed while memgate
was down are sent once, as one late reminder, not once each.

Late: a reminder sent more than `late_after` after it was due says by how much, and, when it was
due before this process started, that memgate was not running then.

Channels: a reminder goes to the chat it was set in. A channel that knows whether anyone reads
it now (the terminal: `bot.channel.KnowsReaders`) names the chat; while nobody does, the reminder
stays due and goes out when a terminal is open again (at the next start, or attach).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from bot.channel import Channel, KnowsReaders
from bot.delivery.outbox import OUTBOX_WRITES, Outbox
from bot.delivery.passes import PassLoop
from bot.errors import StoreError
from bot.message import Reply
from bot.reminders.store import Reminder, select_reminders
from bot.reminders.views import due_text
from memory.store.connection import Conn, Store
from memory.store.rows import utc_naive

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliverySettings:
    poll_seconds: float = 15.0        # the longest sleep between two looks (another process's new reminders)
    late_after_seconds: float = 60.0  # later than this, a reminder says it is late
    batch: int = 100                  # reminders claimed per transaction


class ReminderDelivery(PassLoop):
    """Sends due reminders through the outbox; `run_due` is one pass, `start` loops."""

    def __init__(self, store: Store, outbox: Outbox, channels: Mapping[str, Channel], *,
                 clock: Callable[[], datetime], settings: DeliverySettings | None = None) -> None:
        self.store = store
        self.outbox = outbox
        self.channels = channels
        self.clock = clock
        self.settings = settings or DeliverySettings()
        self.started_at = clock()
        self.sent = 0
        super().__init__("reminders", self.settings.poll_seconds)

    async def start(self) -> None:
        if not self.running:
            self.started_at = self.clock()
        await super().start()

    async def one_pass(self) -> float:
        try:
            return await self.run_due()
        except StoreError as exc:
            log.warning("reminders: the store is not available (%s); retrying", exc)
            return self.settings.poll_seconds

    async def run_due(self) -> float:
        """Queue every reminder due now that can be delivered; the seconds until the next look."""
        now = self.clock()
        due = await self.store.aread(lambda c: select_reminders(
            c, "status = 'active' AND due_at <= ?", [utc_naive(now)]))
        # Those this process can deliver now (a terminal's wait while nobody reads it: they stay due).
        ready = [(r, addr) for r in due if (addr := self._reachable(r)) is not None][: self.settings.batch]
        queued = 0
        if ready:
            queued = await self.store.awrite(lambda c: self._claim(c, ready, now), serial=OUTBOX_WRITES)
            if queued:
                self.sent += queued
                self.outbox.wake()
        if queued >= self.settings.batch:
            return 0.0  # more may be ready: look again at once
        nxt = await self.store.aread(lambda c: c.execute(
            "SELECT min(due_at) FROM reminders WHERE status = 'active' AND due_at > ?", [utc_naive(now)]).fetchone()[0])
        wait = self.settings.poll_seconds
        if nxt is not None:
            wait = min(wait, (nxt - utc_naive(self.clock())).total_seconds())
        return wait

    def _reachable(self, r: Reminder) -> Reply | None:
        """The reply addressed where the reminder goes now; None while it cannot be delivered here."""
        channel = self.channels.get(r.address.channel)
        if channel is None:
            return None  # not a channel of this process (another one delivers it, or a later start)
        a = r.address
        chat = a.chat_id
        if isinstance(channel, KnowsReaders):
            found = channel.reader_chat(a.recipient_id or a.chat_id, a.chat_id)
            if found is None:
                return None
            chat = found
        return Reply(channel=a.channel, chat_id=chat, thread_id=a.thread_id if chat == a.chat_id else None, text="",
                     recipient_id=a.recipient_id)

    def _claim(self, con: Conn, ready: list[tuple[Reminder, Reply]], now: datetime) -> int:
        queued = 0
        stamp = utc_naive(now)
        for r, reply in ready:
            nxt = r.schedule.next_after(max(now, r.due_at))
            late = now - r.due_at
            late = late if late > timedelta(seconds=self.settings.late_after_seconds) or r.due_at < self.started_at \
                and late > timedelta(seconds=1) else None
            if nxt is not None:
                done = con.execute("UPDATE reminders SET due_at = ?, sent = sent + 1, last_sent_at = ? WHERE id = ? "
                                   "AND status = 'active' AND due_at = ? RETURNING id",
                                   [utc_naive(nxt), stamp, r.id, utc_naive(r.due_at)]).fetchall()
            else:
                done = con.execute("UPDATE reminders SET status = 'done', ended_at = ?, sent = sent + 1, last_sent_at = ? "
                                   "WHERE id = ? AND status = 'active' AND due_at = ? RETURNING id",
                                   [stamp, stamp, r.id, utc_naive(r.due_at)]).fetchall()
            if not done:
                continue  # another process claimed it, or it was cancelled, since it was read
            text = due_text(r.text, r.schedule, r.due_at, late, r.due_at < self.started_at, nxt)
            key = r.address.conversation_key if reply.chat_id == r.address.chat_id else \
                f"{reply.channel}:{reply.chat_id}"
            self.outbox.put_in(con, key, replace(reply, text=text))
            queued += 1
            log.info("reminder #%s queued for %s%s", r.id, key, " (late)" if late else "")
        return queued
