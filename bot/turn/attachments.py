"""The gateway's side of attachments: read them before the turn (bot/media), and what happens
to a message whose attachment cannot be read yet.

Such a message waits in the inbox (status `waiting`, words and attachment references kept): the
person is told once, in one line, and the gateway tries again at every start and every
`[media] retry_minutes`, up to `[media] max_attempts` failed tries; then it is closed and the
person told it was given up. How many may wait is bounded, per sender and in all (`[media]
max_waiting_per_person`, `max_waiting`): past that the person is told to send it again later. A
voice note that waits for a speech endpoint is not worn out by tries: it waits until the owner
configures `[speech] model` and restarts, then it is answered. Why wait rather than drop: the
person's words are in the audio; answering them late beats losing them, and the platforms keep a
file fetchable long enough (Telegram file ids do not expire, WeChat media for 3 days).

A file whose read hit a limit, or whose read the process died in, is answered as unreadable and
never read again: the inbox row records each read before it begins (`InboxReadMarks`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.delivery.inbox import WAITING_FULL, Inbox, InboxEntry
from bot.errors import StoreWriteError
from bot.media.reader import NO_SPEECH_NOTE, Attached, MediaProblem, MediaReader, ReadMarks
from bot.message import Message

__all__ = ["GIVEN_UP_TEXT", "NO_SPEECH_NOTE", "WAITING_FULL_TEXT", "InboxReadMarks", "Waiting", "WaitingAttachments",
           "read_attachments"]

log = logging.getLogger(__name__)

GIVEN_UP_TEXT = ("I tried {n} times to read the {what} you sent and could not, so I stopped trying. "
                 "Please send it again, or type what it said.")
# Past `[media] max_waiting_per_person` of the sender's, or `max_waiting` in all (issue 31).
WAITING_FULL_TEXT = ("I can't keep this {what} to read later: too many messages are waiting for me already. "
                     "Please send it again later, or type what it said.")


@dataclass(frozen=True)
class Waiting:
    """The answer to a message that waits in the inbox: told `line` the first time only."""

    line: str
    note: str
    counts: bool  # a failed try (worn out after max_attempts), not waiting for the owner


async def read_attachments(reader: MediaReader, msg: Message, channel: object,
                           marks: ReadMarks | None = None) -> Attached | Waiting | str:
    """The message with its attachments read, or why not: Waiting, or one final line."""
    try:
        return await reader.read(msg, channel, marks)
    except MediaProblem as problem:
        if problem.wait:
            return Waiting(problem.line, problem.note, counts=problem.note != NO_SPEECH_NOTE)
        return problem.line


class InboxReadMarks:
    """ReadMarks on the message's inbox row (its `reading` count survives a restart)."""

    def __init__(self, inbox: Inbox, seq: int) -> None:
        self.inbox = inbox
        self.seq = seq

    async def begin(self) -> bool:
        return await asyncio.to_thread(self.inbox.begin_reading, self.seq)

    async def end(self) -> None:
        await asyncio.to_thread(self.inbox.end_reading, self.seq)


class WaitingAttachments:
    """The inbox's waiting messages: kept with a count of tries (and within bounds), and handed
    back when due."""

    def __init__(self, inbox: Inbox, *, clock: Callable[[], datetime], transcribes: bool, retry_every: float,
                 attempts: int, per_person: int | None = None, total: int | None = None) -> None:
        self.inbox = inbox
        self.clock = clock
        self.transcribes = transcribes  # a speech endpoint is set: notes that waited for one are due
        self.retry_every = retry_every
        self.attempts = attempts
        self.per_person = per_person    # messages of one sender that may wait at once
        self.total = total              # ... and of everyone

    async def keep(self, entry: InboxEntry, waiting: Waiting) -> str | None:
        """Keep the message to try again; the line to tell the person (the first time, that it
        was given up after `attempts` failed tries, or that too many wait to keep it), or None
        when they were told already."""
        tries = await asyncio.to_thread(self.inbox.wait, entry.seq, waiting.note, counts=waiting.counts,
                                        per_person=self.per_person, total=self.total)
        what = next((m.kind.value.replace("voice", "voice note") for m in entry.message.media), "attachment")
        if tries == WAITING_FULL:
            await asyncio.to_thread(self.inbox.close, entry.seq, "not kept: too many waiting")
            return WAITING_FULL_TEXT.format(what=what)
        if waiting.counts and tries >= self.attempts:
            await asyncio.to_thread(self.inbox.close, entry.seq, f"given up: {waiting.note}")
            return GIVEN_UP_TEXT.format(n=tries, what=what)
        return waiting.line if tries <= 1 else None

    async def due(self, channels: Sequence[str], *, everything: bool = False) -> list[InboxEntry]:
        """The waiting messages to queue again (made pending): last tried `retry_every` ago, or all."""
        before = self.clock() if everything else self.clock() - timedelta(seconds=self.retry_every)
        try:
            return await asyncio.to_thread(self.inbox.due_waiting, before, channels,
                                           skip_note=None if self.transcribes else NO_SPEECH_NOTE)
        except StoreWriteError as exc:
            log.warning("retrying waiting attachments failed (%s); the next pass retries", exc)
            return []
