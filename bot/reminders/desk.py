"""Setting, listing and cancelling reminders: one place for the chat command, the agent's tools,
the HTTP API and the MCP tool, so each answers the same way.

A reminder's times are read in the zone of the space it is set in (`/timezone`, else the
configured default). A channel that may write only within some hours of the person's last
message (bot.channel.LimitsReplies) has its reminders set for later answered with a warning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from bot.channel import Channel, LimitsReplies
from bot.reminders.delivery import ReminderDelivery
from bot.reminders.schedule import zone_named
from bot.reminders.store import Address, Reminder, ReminderStore
from bot.reminders.views import ask_text, cancelled_text, lang_of, list_text, set_text
from bot.reminders.when import Understood, Unclear, parse_reminder, parse_when
from memory.redaction import redact

MAX_TEXT_CHARS = 1000   # what to remind of: a line, not a document
MAX_ACTIVE = 200        # per space: a runaway agent loop cannot fill the table


@dataclass(frozen=True, slots=True)
class SetResult:
    """What setting one did: the reminder (None: nothing set) and what to tell the person."""

    reminder: Reminder | None
    answer: str
    unclear: Unclear | None = None


class ReminderDesk:
    def __init__(self, store: ReminderStore, *, clock: Callable[[], datetime],
                 channels: Mapping[str, Channel] | None = None, delivery: ReminderDelivery | None = None) -> None:
        self.store = store
        self.clock = clock
        self.channels = channels if channels is not None else {}
        self.delivery = delivery

    async def zone(self, space_id: str) -> ZoneInfo:
        return zone_named(await self.store.zone(space_id)) or ZoneInfo("UTC")

    async def set(self, space_id: str, address: Address | None, set_by: str, *, text: str | None = None,
                  when: str | None = None, what: str | None = None, direct: bool = False) -> SetResult:
        """Set a reminder from a `/remind` text (WHEN WHAT), or from WHEN and WHAT apart (the tools).

        `address` None: to the person's direct chat (the API, MCP); `direct`: `address` is one, kept as theirs."""
        if address is None:
            address = await self.store.direct_chat(space_id)
            if address is None:
                return SetResult(None, "No chat of this person is known yet: they must write to the bot once first.")
        elif direct:
            await self.store.note_dm(space_id, address)
        zone = await self.zone(space_id)
        now = self.clock()
        # In a thread: a phrase our rules do not read goes to dateparser, whose first use imports it
        # (seconds on a busy machine), which must not hold the event loop.
        if text is not None:
            parsed = await asyncio.to_thread(parse_reminder, text, now, zone)
            lang = lang_of(text)
        else:
            parsed = await asyncio.to_thread(parse_when, when or "", now, zone)
            if isinstance(parsed, Understood):
                parsed = Understood(parsed.schedule, parsed.when, (what or "").strip())
            else:
                parsed = Unclear(parsed.kind, parsed.when, (what or "").strip(), parsed.options)
            lang = lang_of(when or "", what or "")
        if isinstance(parsed, Understood) and not parsed.what:
            parsed = Unclear("no_what", parsed.when, "", (parsed.schedule,))
        if isinstance(parsed, Unclear):
            return SetResult(None, ask_text(parsed, lang), parsed)
        # Kept at rest and sent back later: a secret typed into it is not ("/remember" does the same).
        what = redact(parsed.what[:MAX_TEXT_CHARS])
        if len(await self.store.active([space_id])) >= MAX_ACTIVE:
            return SetResult(None, f"You have {MAX_ACTIVE} reminders already; cancel some first (/reminders).")
        rec = await self.store.acreate(space_id, address, set_by, what, parsed.schedule)
        if self.delivery is not None:
            self.delivery.wake()
        channel = self.channels.get(address.channel)
        window = channel.reply_window_hours if isinstance(channel, LimitsReplies) else None
        return SetResult(rec, set_text(rec.id, what, rec.schedule, now, lang, window))

    async def listing(self, space_ids: Sequence[str], zone_space: str, lang: str = "en") -> str:
        rows = await self.store.active(space_ids)
        zone = (await self.zone(zone_space)).key
        return list_text(rows, zone, "zh" if lang == "zh" else lang_of(*(r.text for r in rows)))

    async def cancel(self, reminder_id: int, space_ids: Sequence[str], lang: str = "en") -> tuple[Reminder | None, str]:
        r = await self.store.cancel(reminder_id, space_ids)
        if r is None:
            return None, (f"没有这个提醒：#{reminder_id}（看看 /reminders）" if lang == "zh" else
                          f"There is no active reminder #{reminder_id} of yours (see /reminders).")
        return r, cancelled_text(r, lang_of(r.text))
