"""Reminders and each person's reminder settings, in the database (DuckDB and PostgreSQL alike).

A reminder belongs to a space (the person's, or a group's) and to the conversation it was set in,
where it is delivered. Its next due instant is stored as naive UTC (`due_at`); a repeating one
also keeps its local wall time, rule and zone, so the next due instant is computed in local time
(bot/reminders/schedule.py). Every table here has a `space_id` column: erasing a person's spaces
erases their reminders, settings and follow-up records with them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.delivery.outbox import OUTBOX_WRITES
from bot.reminders.schedule import Schedule
from memory.store.connection import Conn, Migration, Store
from memory.store.rows import utc_naive

REMINDER_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        600,
        "reminders",
        """
        CREATE TABLE reminders (
            id BIGINT PRIMARY KEY,              -- shown to people as #id
            space_id VARCHAR NOT NULL,          -- whose reminder (the person's space, or a group's)
            conversation_key VARCHAR NOT NULL,  -- where it was set, and is delivered
            channel VARCHAR NOT NULL,
            chat_id VARCHAR NOT NULL,
            thread_id VARCHAR,
            recipient_id VARCHAR,
            set_by VARCHAR NOT NULL,            -- the identity key of who set it
            text VARCHAR NOT NULL,              -- what to remind of
            zone VARCHAR NOT NULL,              -- IANA zone its local times are in
            every VARCHAR,                      -- NULL: once; day | weekdays | week
            hour INTEGER,                       -- a repeating one's local wall time
            minute INTEGER,
            due_at TIMESTAMP NOT NULL,          -- the next time it is due (naive UTC)
            status VARCHAR NOT NULL,            -- active | done | cancelled
            sent INTEGER NOT NULL DEFAULT 0,
            last_sent_at TIMESTAMP,
            created_at TIMESTAMP NOT NULL,
            ended_at TIMESTAMP
        );
        CREATE INDEX reminders_due ON reminders(status, due_at);
        CREATE INDEX reminders_space ON reminders(space_id);
        CREATE TABLE reminder_prefs (
            space_id VARCHAR PRIMARY KEY,       -- the person's own space
            zone VARCHAR,                       -- /timezone; NULL: the configured default
            followups BOOLEAN NOT NULL DEFAULT false,  -- /followups on
            channel VARCHAR,                    -- the direct chat follow-ups go to
            chat_id VARCHAR,
            recipient_id VARCHAR,
            updated_at TIMESTAMP NOT NULL
        );
        CREATE TABLE followups (
            space_id VARCHAR NOT NULL,
            memory_id VARCHAR NOT NULL,         -- the memory that holds the dated plan or event
            event_day DATE NOT NULL,
            asked_at TIMESTAMP NOT NULL,
            PRIMARY KEY (space_id, memory_id)
        );
        """,
    ),
)
# The tables holding a space's reminder data (for erasing a person: issue 35).
REMINDER_TABLES = ("reminders", "reminder_prefs", "followups")


@dataclass(frozen=True, slots=True)
class Address:
    """Where a reminder is delivered: the chat (and topic) it was set in, and to whom."""

    channel: str
    chat_id: str
    thread_id: str | None = None
    recipient_id: str | None = None

    @property
    def conversation_key(self) -> str:
        base = f"{self.channel}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base


@dataclass(frozen=True, slots=True)
class Reminder:
    id: int
    space_id: str
    address: Address
    set_by: str
    text: str
    schedule: Schedule          # `first` is the next due instant
    status: str
    sent: int
    created_at: datetime

    @property
    def due_at(self) -> datetime:
        return self.schedule.first


_COLUMNS = ("id, space_id, channel, chat_id, thread_id, recipient_id, set_by, text, zone, every, hour, minute, due_at, "
            "status, sent, created_at")


def _aware(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


def reminder_from_row(row: Sequence) -> Reminder:
    (rid, space, channel, chat, thread, recipient, set_by, text, zone, every, hour, minute, due, status, sent,
     created) = row
    sched = Schedule(first=_aware(due), zone=zone, every=every, hour=hour or 0, minute=minute or 0)
    return Reminder(rid, space, Address(channel, chat, thread, recipient), set_by, text, sched, status, sent,
                    _aware(created))


def select_reminders(con: Conn, where: str, params: Sequence) -> list[Reminder]:
    rows = con.execute(f"SELECT {_COLUMNS} FROM reminders WHERE {where} ORDER BY due_at, id", list(params)).fetchall()
    return [reminder_from_row(r) for r in rows]


def count_active(con: Conn, space_ids: Sequence[str]) -> int:
    """Active reminders in the spaces (what "/forget everything" would take with it)."""
    return con.execute("SELECT count(*) FROM reminders WHERE status = 'active' AND space_id IN (SELECT unnest(?))",
                       [list(space_ids)]).fetchone()[0]


@dataclass(frozen=True, slots=True)
class Prefs:
    zone: str | None = None
    followups: bool = False
    dm: Address | None = None   # where follow-ups go


class ReminderStore:
    """Creates, lists and cancels reminders; keeps each person's zone and follow-up choice."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime], default_zone: str = "UTC") -> None:
        self.store = store
        self.clock = clock
        self.default_zone = default_zone

    def create(self, space_id: str, address: Address, set_by: str, text: str, schedule: Schedule) -> Reminder:
        now = utc_naive(self.clock())

        def write(con: Conn) -> Reminder:
            rid = con.execute("SELECT coalesce(max(id), 0) + 1 FROM reminders").fetchone()[0]
            con.execute(
                "INSERT INTO reminders (id, space_id, conversation_key, channel, chat_id, thread_id, recipient_id, set_by, "
                "text, zone, every, hour, minute, due_at, status, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?)",
                [rid, space_id, address.conversation_key, address.channel, address.chat_id, address.thread_id,
                 address.recipient_id, set_by, text, schedule.zone, schedule.every,
                 schedule.hour if schedule.every else None, schedule.minute if schedule.every else None,
                 utc_naive(schedule.first), now])
            return select_reminders(con, "id = ?", [rid])[0]

        # The outbox's serial: a new id never races another process's, nor a claim (bot/reminders/delivery.py).
        return self.store.write(write, serial=OUTBOX_WRITES)

    async def acreate(self, space_id: str, address: Address, set_by: str, text: str, schedule: Schedule) -> Reminder:
        import asyncio

        return await asyncio.to_thread(self.create, space_id, address, set_by, text, schedule)

    async def active(self, space_ids: Sequence[str], conversation_key: str | None = None) -> list[Reminder]:
        """The spaces' active reminders, soonest first (of one conversation, when given)."""
        where = "status = 'active' AND space_id IN (SELECT unnest(?))"
        params: list = [list(space_ids)]
        if conversation_key is not None:
            where += " AND conversation_key = ?"
            params.append(conversation_key)
        return await self.store.aread(lambda c: select_reminders(c, where, params))

    async def every_active(self) -> list[Reminder]:
        """Every space's active reminders (the admin's view)."""
        return await self.store.aread(lambda c: select_reminders(c, "status = 'active'", []))

    async def get(self, reminder_id: int, space_ids: Sequence[str]) -> Reminder | None:
        rows = await self.store.aread(lambda c: select_reminders(
            c, "id = ? AND space_id IN (SELECT unnest(?))", [reminder_id, list(space_ids)]))
        return rows[0] if rows else None

    async def cancel(self, reminder_id: int, space_ids: Sequence[str]) -> Reminder | None:
        """Cancel an active reminder of these spaces; None when there is no such one."""
        now = utc_naive(self.clock())

        def write(con: Conn) -> Reminder | None:
            done = con.execute("UPDATE reminders SET status = 'cancelled', ended_at = ? WHERE id = ? AND status = 'active' "
                               "AND space_id IN (SELECT unnest(?)) RETURNING id", [now, reminder_id, list(space_ids)]).fetchall()
            return select_reminders(con, "id = ?", [reminder_id])[0] if done else None

        return await self.store.awrite(write, serial=OUTBOX_WRITES)

    # --- a person's settings -------------------------------------------------------------------
    async def prefs(self, space_id: str) -> Prefs:
        row = await self.store.aread(lambda c: c.execute(
            "SELECT zone, followups, channel, chat_id, recipient_id FROM reminder_prefs WHERE space_id = ?",
            [space_id]).fetchone())
        if row is None:
            return Prefs()
        dm = Address(row[2], row[3], None, row[4]) if row[2] else None
        return Prefs(row[0], bool(row[1]), dm)

    async def zone(self, space_id: str) -> str:
        """The person's zone: theirs from /timezone, else the configured default."""
        return (await self.prefs(space_id)).zone or self.default_zone

    async def set_zone(self, space_id: str, zone: str) -> None:
        await self._upsert(space_id, "zone", [zone])

    async def set_followups(self, space_id: str, on: bool, dm: Address | None) -> None:
        if on and dm is not None:
            await self._upsert(space_id, "followups, channel, chat_id, recipient_id", [True, dm.channel, dm.chat_id,
                                                                                       dm.recipient_id])
        else:
            await self._upsert(space_id, "followups", [False])

    async def note_dm(self, space_id: str, dm: Address) -> None:
        """Remember the person's direct chat (where reminders set over the API or MCP, and follow-ups, go)."""
        await self._upsert(space_id, "channel, chat_id, recipient_id", [dm.channel, dm.chat_id, dm.recipient_id])

    async def direct_chat(self, space_id: str) -> Address | None:
        """The person's direct chat: the one they last used for reminders, else their newest account's."""
        dm = (await self.prefs(space_id)).dm
        if dm is not None:
            return dm
        row = await self.store.aread(lambda c: c.execute(
            "SELECT channel, external_id FROM identities WHERE space_id = ? AND role <> 'blocked' AND channel <> 'api' "
            "ORDER BY updated_at DESC LIMIT 1", [space_id]).fetchone())
        return Address(row[0], row[1], None, row[1]) if row else None

    async def _upsert(self, space_id: str, columns: str, values: list) -> None:
        names = [c.strip() for c in columns.split(",")]
        now = utc_naive(self.clock())
        sql = (f"INSERT INTO reminder_prefs (space_id, {columns}, updated_at) VALUES (?, {', '.join('?' for _ in names)}, ?) "
               f"ON CONFLICT (space_id) DO UPDATE SET {', '.join(f'{n} = excluded.{n}' for n in names)}, "
               "updated_at = excluded.updated_at")
        await self.store.awrite(lambda c: c.execute(sql, [space_id, *values, now]))
